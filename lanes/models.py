"""A lane: one loopback server process with its own engine child and settings."""

from django.db import models

TEMPLATE_CHOICES = [
    ("chatml-tools", "ChatML with tools and thinking (shipped with Strata)"),
    ("model", "The model file's own chat template"),
]
KV_TYPE_CHOICES = [("f16", "f16"), ("q8_0", "q8_0")]


class Lane(models.Model):
    """Settings of one lane; `runlane NAME` reads them at start."""

    name = models.SlugField(max_length=50, unique=True)
    port = models.PositiveIntegerField(unique=True)
    model_file = models.CharField(
        max_length=500, blank=True, help_text="Path to a GGUF file; blank means the bundled SmolLM2 model."
    )
    max_context = models.PositiveIntegerField(default=8192, help_text="Tokens per sequence (prompt + output).")
    slack = models.PositiveIntegerField(default=16, help_text="Tokens kept free at the end of the window.")
    slots = models.PositiveIntegerField(default=4, help_text="Sequences that share the engine at once.")
    max_queue = models.PositiveIntegerField(
        default=16, help_text="Requests that may wait for a slot; beyond slots + this the lane answers 409."
    )
    fit_max_tokens = models.BooleanField(
        default=True, help_text="Clamp max_tokens to the room left instead of answering 400."
    )
    chat_template = models.CharField(max_length=40, choices=TEMPLATE_CHOICES, default="chatml-tools")
    kv_cache_type = models.CharField(max_length=10, choices=KV_TYPE_CHOICES, default="f16")
    engine_options = models.CharField(
        max_length=500, blank=True,
        help_text="More `python -m engine` options, passed through to the model load: e.g. "
        "`--n-cpu-moe 8` (MoE experts of the first 8 layers in RAM), `--n-gpu-layers 99`, `--no-mmap`, "
        "`--flash-attn on`, `--interactive-ms 500`. See `python -m engine --help`.",
    )
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["port"]

    def __str__(self):
        return self.name

    @property
    def base_url(self) -> str:
        from django.conf import settings

        return f"http://{settings.STRATA_LANE_HOST}:{self.port}"
