"""kernelopt settings: everything comes from the environment (see README.md).

With nothing set, the embedded defaults apply: a SQLite file under var/ and an in-process
worker on dramatiq's stub broker, so `make run` works on any machine. With DATABASE_URL and
BROKER_URL set it is Postgres and RabbitMQ (or Redis) with separate `rundramatiq` workers.
"""

from __future__ import annotations

from datetime import timedelta
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
    "axes",
    "csp",
    "diagnosis",
    "runner",
]

# RequestBodyLimitMiddleware must come before anything that reads the body (sessions, CSRF,
# auth, axes); Security and CSP above it only add headers or redirect, and give the 413 theirs.
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "kernelopt_site.middleware.RequestBodyLimitMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as axes requires: it turns a lockout into its page
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
# Whole request bodies: above this, 413 from the headers alone (kernelopt_site.middleware),
# anonymous or signed in, before CSRF or the multipart parser read a byte. 4x the module limit
# leaves a file a few times too large to the form's own error naming its size, and covers a
# module at the limit pasted into a urlencoded form (percent-encoding up to triples it);
# 64 KiB is for the other fields and the multipart framing.
KERNELOPT_MAX_REQUEST_BYTES = envint(
    "KERNELOPT_MAX_REQUEST_BYTES",
    4 * KERNELOPT_MAX_UPLOAD_BYTES + 64 * 1024,
    minimum=KERNELOPT_MAX_UPLOAD_BYTES,
)
# Every body that passes the middleware is parsed in memory: no field is refused below the
# request limit, and no file part is ever spooled to a temporary file.
DATA_UPLOAD_MAX_MEMORY_SIZE = KERNELOPT_MAX_REQUEST_BYTES
FILE_UPLOAD_MAX_MEMORY_SIZE = KERNELOPT_MAX_REQUEST_BYTES

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
# Workers: the kinds this host's worker serves (default: cpu, and each accelerator whose device
# node exists; runner.workers), how often it says so, and how long a kind counts as served after
# its last beat. The forms refuse a kind no live worker serves.
KERNELOPT_WORKER_DEVICES = envlist("KERNELOPT_WORKER_DEVICES", [])
if _unknown := sorted(set(KERNELOPT_WORKER_DEVICES) - set(devices.NAMES)):
    raise ImproperlyConfigured(f"KERNELOPT_WORKER_DEVICES names unknown kinds {_unknown}; known: {', '.join(devices.NAMES)}")
KERNELOPT_WORKER_BEAT_SECONDS = envint("KERNELOPT_WORKER_BEAT_SECONDS", 30, minimum=1)
KERNELOPT_WORKER_LIVE_SECONDS = envint("KERNELOPT_WORKER_LIVE_SECONDS", 90, minimum=2)
if KERNELOPT_WORKER_LIVE_SECONDS <= KERNELOPT_WORKER_BEAT_SECONDS:
    raise ImproperlyConfigured("KERNELOPT_WORKER_LIVE_SECONDS must be longer than KERNELOPT_WORKER_BEAT_SECONDS")
KERNELOPT_CHILD_PYTHONS = {kind: envstr(f"KERNELOPT_PYTHON_{kind.upper()}") for kind in devices.NAMES}
KERNELOPT_ROUND_BUDGET = envint("KERNELOPT_ROUND_BUDGET", 15, minimum=1)
KERNELOPT_SOL_STOP_FRACTION = envfloat("KERNELOPT_SOL_STOP_FRACTION", 0.85)
KERNELOPT_STALE_RUN_SECONDS = envint("KERNELOPT_STALE_RUN_SECONDS", 900, minimum=10)
KERNELOPT_MAX_RUN_ATTEMPTS = envint("KERNELOPT_MAX_RUN_ATTEMPTS", 3, minimum=1)
KERNELOPT_RETRY_BACKOFF_S = envfloat("KERNELOPT_RETRY_BACKOFF_S", 5.0)
# Seconds of rounds per run, counted after the initial version's verify (0: no limit), and
# seconds each compile of a candidate's kernels may take before its config is dropped (0: no
# bound but the job's own time limit; runner.childlib.compile_bound).
KERNELOPT_ROUND_TIME_BUDGET_S = envfloat("KERNELOPT_ROUND_TIME_BUDGET_S", 0.0)
KERNELOPT_COMPILE_TIMEOUT_S = envfloat("KERNELOPT_COMPILE_TIMEOUT_S", 0.0)

# LLM proposer (optional): any OpenAI-compatible endpoint (a hosted API, vLLM, llama.cpp's
# server, Ollama). With LLM_BASE_URL and LLM_MODEL set, the upload form offers the llm and
# rules-then-llm proposers; web and workers read the same variables. The key is read from the
# environment only: it is never stored in the database, and the sandbox child's scrubbed
# environment never has it (runner.sandbox).
LLM_BASE_URL = envstr("LLM_BASE_URL")
LLM_MODEL = envstr("LLM_MODEL")
LLM_MODELS = envlist("LLM_MODELS", [])  # other models a run may choose (the endpoint must serve them)
LLM_API_KEY = envstr("LLM_API_KEY")
LLM_TIMEOUT_S = envfloat("LLM_TIMEOUT_S", 120.0)  # per attempt
LLM_MAX_RETRIES = envint("LLM_MAX_RETRIES", 2, minimum=0)  # the client's retries on 429, 5xx, timeouts
# "none" (or empty): send no temperature, for models that accept only their default
LLM_TEMPERATURE = (
    None
    if (envstr("LLM_TEMPERATURE") or "0.2").strip().lower() in ("", "none")
    else envfloat("LLM_TEMPERATURE", 0.2)
)
LLM_MAX_COMPLETION_TOKENS = envint("LLM_MAX_COMPLETION_TOKENS", 8192, minimum=256)
# hard caps, prompt + completion; a run may ask for less, never for more
LLM_ROUND_TOKENS = envint("LLM_ROUND_TOKENS", 32_000, minimum=2000)
LLM_RUN_TOKENS = envint("LLM_RUN_TOKENS", 400_000, minimum=2000)
# estimated cost: price per 1M prompt / completion tokens (both 0: the cost is shown as unknown)
LLM_PRICE_PROMPT_PER_M = envfloat("LLM_PRICE_PROMPT_PER_M", 0.0)
LLM_PRICE_COMPLETION_PER_M = envfloat("LLM_PRICE_COMPLETION_PER_M", 0.0)
# the request field that bounds the answer: max_tokens (most servers) or max_completion_tokens
# (OpenAI's reasoning models, which also take no temperature: set LLM_TEMPERATURE=none)
LLM_TOKEN_PARAM = envstr("LLM_TOKEN_PARAM", "max_tokens")
# rules then LLM: the LLM goes first after this many rounds on one version without a win
LLM_HYBRID_STALL_ROUNDS = envint("LLM_HYBRID_STALL_ROUNDS", 2, minimum=1)
if bool(LLM_BASE_URL) != bool(LLM_MODEL):
    raise ImproperlyConfigured("LLM_BASE_URL and LLM_MODEL must be set together")
if LLM_TOKEN_PARAM not in ("max_tokens", "max_completion_tokens"):
    raise ImproperlyConfigured(f"LLM_TOKEN_PARAM={LLM_TOKEN_PARAM!r}: use max_tokens or max_completion_tokens")
if LLM_TEMPERATURE is not None and not 0.0 <= LLM_TEMPERATURE <= 2.0:
    raise ImproperlyConfigured(f"LLM_TEMPERATURE={LLM_TEMPERATURE} is outside 0..2")
if LLM_RUN_TOKENS < LLM_ROUND_TOKENS:
    raise ImproperlyConfigured("LLM_RUN_TOKENS must be at least LLM_ROUND_TOKENS")

# --- Web limits: login throttling, Content-Security-Policy, HTTPS (issue 16) ------------------

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the hx-headers attribute, not the cookie
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"

# KERNELOPT_HTTPS=1: served only over HTTPS, behind a proxy that terminates TLS and sets
# X-Forwarded-Proto (it must overwrite what a client sends). Secure cookies, HSTS for a year
# on subdomains too, a redirect of plain HTTP, and `check --deploy` with nothing to say.
KERNELOPT_HTTPS = envbool("KERNELOPT_HTTPS", False)
if KERNELOPT_HTTPS:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = envint("KERNELOPT_HSTS_SECONDS", 365 * 24 * 3600, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    # The directive alone changes nothing: a browser preloads a domain only once its owner
    # submits the registrable domain to the preload list. KERNELOPT_HSTS_PRELOAD=0 drops it.
    SECURE_HSTS_PRELOAD = envbool("KERNELOPT_HSTS_PRELOAD", True)
elif not DEBUG and envbool("KERNELOPT_SECURE_COOKIES", False):
    # Kept for deployments that set it before KERNELOPT_HTTPS existed: cookies only.
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True

# Reverse proxies in front of the app that append to X-Forwarded-For; the login throttle reads
# the client address from that header only when this is above 0 (kernelopt_site.login).
# HTTPS mode already trusts one proxy's X-Forwarded-Proto, so it defaults to 1 there.
KERNELOPT_PROXY_COUNT = envint("KERNELOPT_PROXY_COUNT", 1 if KERNELOPT_HTTPS else 0, minimum=0)

# Login throttling (django-axes, database handler: one count for every web process, on
# Postgres and on `make run`'s SQLite alike). The lock is per user name and client address,
# so a stranger cannot lock a user out from elsewhere; a good login resets the count.
KERNELOPT_LOGIN_FAILURES = envint("KERNELOPT_LOGIN_FAILURES", 5, minimum=1)
KERNELOPT_LOGIN_COOLOFF_MINUTES = envint("KERNELOPT_LOGIN_COOLOFF_MINUTES", 15, minimum=1)
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = KERNELOPT_LOGIN_FAILURES
AXES_COOLOFF_TIME = timedelta(minutes=KERNELOPT_LOGIN_COOLOFF_MINUTES)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "kernelopt_site.login.client_ip"
AXES_LOCKOUT_CALLABLE = "kernelopt_site.login.lockout_response"
AXES_VERBOSE = False  # no start-up banner on every manage.py command; lockouts are still logged

# Content-Security-Policy (django-csp; Django 5.2 has none of its own). Every script and style
# is a file under static/; htmx is told not to insert its indicator <style> or evaluate code
# (the htmx-config meta tag in base.html).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
}
