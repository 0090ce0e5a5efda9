from django.apps import AppConfig


class InferArchiveConfig(AppConfig):
    name = "infer_archive"
    verbose_name = "Inference archive"
