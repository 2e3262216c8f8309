"""kernelopt settings: everything comes from the environment (see README.md).

With nothing set, the embedded defaults apply: a SQLite file under var/ and an in-process
worker on dramatiq's stub broker, so `make run` works on any machine. With DATABASE_URL and
BROKER_URL set it is Postgres and RabbitMQ (or Redis) with separate `rundramatiq` workers.
"""

from __future__ import annotations

from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from diagnosis.engine import devices
from kernelopt_site.env import (
    broker_from_url,
    database_from_url,
    envbool,
    envfloat,
    envint,
    envlist,
    envstr,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(envstr("KERNELOPT_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = envbool("DEBUG", False)
SECRET_KEY = envstr("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG and envbool("KERNELOPT_REQUIRE_SECRET", False):
        raise ImproperlyConfigured("SECRET_KEY must be set")
    # Embedded mode: a per-machine key kept under var/, never committed.
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    key_file = VAR_DIR / "secret_key"
    if not key_file.exists():
        import secrets

        key_file.write_text(secrets.token_urlsafe(50))
        key_file.chmod(0o600)
    SECRET_KEY = key_file.read_text().strip()

ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "django_dramatiq",
    "diagnosis",
    "runner",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "kernelopt_site.urls"
WSGI_APPLICATION = "kernelopt_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
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

DATABASE_URL = envstr("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'kernelopt.sqlite3'}"
DATABASES = {"default": database_from_url(DATABASE_URL)}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    VAR_DIR.mkdir(parents=True, exist_ok=True)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "kernel-list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"

# Uploads: the validator rejects files above this many bytes before parsing them.
KERNELOPT_MAX_UPLOAD_BYTES = envint("KERNELOPT_MAX_UPLOAD_BYTES", 256 * 1024, minimum=1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = KERNELOPT_MAX_UPLOAD_BYTES * 2 + 64 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = DATA_UPLOAD_MAX_MEMORY_SIZE

# Broker: only run ids travel through it. Embedded mode uses the stub broker and a worker
# thread started with the server (runner.embedded).
BROKER_URL = envstr("BROKER_URL") or "stub://"
_broker_class, _broker_options = broker_from_url(BROKER_URL)
DRAMATIQ_BROKER = {
    "BROKER": _broker_class,
    "OPTIONS": _broker_options,
    "MIDDLEWARE": [
        "dramatiq.middleware.AgeLimit",
        "dramatiq.middleware.TimeLimit",
        "dramatiq.middleware.Callbacks",
        "dramatiq.middleware.Retries",
        "django_dramatiq.middleware.DbConnectionsMiddleware",
    ],
}
DRAMATIQ_AUTODISCOVER_MODULES = ["tasks"]
KERNELOPT_EMBEDDED_WORKER = envbool("KERNELOPT_EMBEDDED_WORKER", BROKER_URL.startswith("stub"))

# Execution: which device kinds this deployment offers (diagnosis.engine.devices registers
# them), and the child's interpreter per kind (KERNELOPT_PYTHON_CUDA, ...; None: the worker's).
KERNELOPT_DEVICES = envlist("KERNELOPT_DEVICES", devices.default_offer())
if _unknown := sorted(set(KERNELOPT_DEVICES) - set(devices.NAMES)):
    raise ImproperlyConfigured(f"KERNELOPT_DEVICES names unknown kinds {_unknown}; known: {', '.join(devices.NAMES)}")
KERNELOPT_DEFAULT_ARCH = envstr(
    "KERNELOPT_DEFAULT_ARCH", devices.get((KERNELOPT_DEVICES or devices.default_offer())[0]).default_target
)
KERNELOPT_CHILD_PYTHONS = {kind: envstr(f"KERNELOPT_PYTHON_{kind.upper()}") for kind in devices.NAMES}
KERNELOPT_ROUND_BUDGET = envint("KERNELOPT_ROUND_BUDGET", 15, minimum=1)
KERNELOPT_SOL_STOP_FRACTION = envfloat("KERNELOPT_SOL_STOP_FRACTION", 0.85)
KERNELOPT_STALE_RUN_SECONDS = envint("KERNELOPT_STALE_RUN_SECONDS", 900, minimum=10)
KERNELOPT_MAX_RUN_ATTEMPTS = envint("KERNELOPT_MAX_RUN_ATTEMPTS", 3, minimum=1)
KERNELOPT_RETRY_BACKOFF_S = envfloat("KERNELOPT_RETRY_BACKOFF_S", 5.0)

# LLM proposer (optional): any OpenAI-compatible endpoint.
LLM_BASE_URL = envstr("LLM_BASE_URL")
LLM_MODEL = envstr("LLM_MODEL")
LLM_API_KEY = envstr("LLM_API_KEY")
LLM_TIMEOUT_S = envfloat("LLM_TIMEOUT_S", 120.0)
if bool(LLM_BASE_URL) != bool(LLM_MODEL):
    raise ImproperlyConfigured("LLM_BASE_URL and LLM_MODEL must be set together")

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the hx-headers attribute, not the cookie
X_FRAME_OPTIONS = "DENY"
if not DEBUG and envbool("KERNELOPT_SECURE_COOKIES", False):
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
}
