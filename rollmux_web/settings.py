"""Settings for the RollMux web app: one module, driven by the environment.

With nothing set it runs on SQLite with in-process tasks (no Redis), so `make run`
works on a fresh machine. `DATABASE_URL` switches to PostgreSQL and `REDIS_URL`
to a real Celery broker. Bad values stop the process with ImproperlyConfigured.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from urllib.parse import unquote, urlparse

from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ImproperlyConfigured(f"Unexpected value {name}={raw!r}: use true or false")


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"Unexpected value {name}={raw!r}: expected a number") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"Unexpected value {name}={raw!r}: must be >= {minimum}")
    return value


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(
            f"Unexpected value {name}={raw!r}: expected an integer"
        ) from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"Unexpected value {name}={raw!r}: must be >= {minimum}")
    return value


def database_from_url(url: str) -> dict[str, object]:
    """Return a DATABASES entry for a postgres:// or sqlite:/// URL."""
    parsed = urlparse(url)
    if parsed.scheme in ("postgres", "postgresql"):
        name = parsed.path.lstrip("/")
        if not name:
            raise ImproperlyConfigured(f"DATABASE_URL {url!r} names no database")
        try:
            port = parsed.port
        except ValueError:
            raise ImproperlyConfigured(f"DATABASE_URL {url!r} has a non-numeric port") from None
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(name),
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(port or ""),
            "CONN_MAX_AGE": 60,
            "CONN_HEALTH_CHECKS": True,
        }
    if parsed.scheme == "sqlite":
        path = url[len("sqlite:///") :] if url.startswith("sqlite:///") else ""
        if not path:
            raise ImproperlyConfigured(f"DATABASE_URL {url!r}: use sqlite:///path/to/file")
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": path}
    raise ImproperlyConfigured(
        f"DATABASE_URL scheme {parsed.scheme!r} is not supported: use postgres:// or sqlite:///"
    )


DEBUG = env_bool("DEBUG", False)


def embedded_secret_key(path: Path) -> str:
    """Return this checkout's own random key, created on first use (never in the repo)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # a concurrent first start wrote it
        else:
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_urlsafe(50))
    return path.read_text().strip()


_secret = os.environ.get("SECRET_KEY", "")
if not _secret:
    if DEBUG or env_bool("ROLLMUX_EMBEDDED", True):
        # Embedded default (make run, tests): a per-checkout key under var/ (git-ignored).
        # Production sets SECRET_KEY; docker-compose refuses to start without it.
        _secret = embedded_secret_key(BASE_DIR / "var" / "secret_key")
    else:
        raise ImproperlyConfigured("SECRET_KEY must be set when ROLLMUX_EMBEDDED=false")
elif len(_secret) < 16:
    raise ImproperlyConfigured("SECRET_KEY is too short: use at least 16 characters")
SECRET_KEY = _secret

ALLOWED_HOSTS = [
    h.strip()
    for h in env_str("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver").split(",")
    if h.strip()
]
if not ALLOWED_HOSTS:
    raise ImproperlyConfigured("ALLOWED_HOSTS is empty")
CSRF_TRUSTED_ORIGINS = [
    o.strip() for o in env_str("CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()
]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "template_partials",
    "rollmux_web.accounts",
    "rollmux_web.inventory",
    "rollmux_web.quotas",
    "rollmux_web.jobs",
    "rollmux_web.workflow",
    "rollmux_web.audit",
    "rollmux_web.reports",
    # the composition root: wires the web app's ports to the dispatchers and triggers
    "workers",
]

MIDDLEWARE = [
    "rollmux_web.health.middleware.HealthMiddleware",  # probes: before Host checks/redirects
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "rollmux_web.metrics.MetricsMiddleware",
]

ROOT_URLCONF = "rollmux_web.urls"
WSGI_APPLICATION = "rollmux_web.wsgi.application"

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
                "rollmux_web.accounts.context_processors.persona",
            ],
        },
    }
]

DATABASE_URL = env_str("DATABASE_URL", "")
DATABASES = {
    "default": database_from_url(DATABASE_URL)
    if DATABASE_URL
    else {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(BASE_DIR / "rollmux.sqlite3"),
        "OPTIONS": {"timeout": 30},
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

DATA_UPLOAD_MAX_MEMORY_SIZE = 8 * 1024 * 1024
SPEC_FILE_MAX_BYTES = env_int("ROLLMUX_SPEC_FILE_MAX_BYTES", 1024 * 1024, minimum=1024)

# --- REST API ---------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rollmux_web.accounts.auth.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rollmux_web.api.pagination.Pagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "rollmux_web.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "RollMux API",
    "DESCRIPTION": "Submit and track RL post-training jobs multiplexed across rollout and training pools.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
}

# --- Celery -------------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL", "")
if REDIS_URL and not REDIS_URL.startswith(("redis://", "rediss://")):
    raise ImproperlyConfigured(f"REDIS_URL {REDIS_URL!r} must start with redis:// or rediss://")
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = REDIS_URL or "cache+memory://"
# Embedded mode (no REDIS_URL): tasks run in-process, right after the commit that queues them.
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", not REDIS_URL)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 300}
CELERY_TASK_DEFAULT_QUEUE = "rollmux"
# What-if simulations are CPU-heavy and long: they get their own queue and worker, so a
# simulation never holds up the group controller's phase events (the switch path).
ROLLMUX_SIM_QUEUE = "rollmux-sim"
CELERY_TASK_ROUTES = {"reports.run_whatif": {"queue": ROLLMUX_SIM_QUEUE}}
CELERY_BEAT_SCHEDULE = {
    "plan-safety-net": {"task": "workers.tasks.plan", "schedule": 30.0},
    "reconcile": {"task": "workers.tasks.reconcile", "schedule": 15.0},
}

# --- Scheduling and execution ------------------------------------------------
ROLLMUX_MAX_GROUP_SIZE = env_int("ROLLMUX_MAX_GROUP_SIZE", 5, minimum=1)
ROLLMUX_SWITCH_OVERHEAD_S = env_float("ROLLMUX_SWITCH_OVERHEAD_S", 2.0, minimum=0.0)
ROLLMUX_TIME_SCALE = env_float("ROLLMUX_TIME_SCALE", 20.0, minimum=1e-6)  # why: see seed_demo
ROLLMUX_MAX_ATTEMPTS = env_int("ROLLMUX_MAX_ATTEMPTS", 3, minimum=1)
ROLLMUX_DISPATCHER = env_str("ROLLMUX_DISPATCHER", "ray")  # "ray" or "inline"
ROLLMUX_RAY_ADDRESS = env_str("ROLLMUX_RAY_ADDRESS", "local")
# Where job hosts write a checkpoint after each training phase (shared storage in production).
ROLLMUX_CHECKPOINT_DIR = env_str("ROLLMUX_CHECKPOINT_DIR", str(BASE_DIR / "var" / "checkpoints"))
# How long an `external` runner waits for the trainer (rollmux.phase) to finish a phase.
ROLLMUX_EXTERNAL_TIMEOUT_S = env_float("ROLLMUX_EXTERNAL_TIMEOUT_S", 3600.0, minimum=1.0)
# reconcile: a phase may run 3 x its worst-case duration plus this before it counts as overrun
ROLLMUX_PHASE_GRACE_S = env_float("ROLLMUX_PHASE_GRACE_S", 60.0, minimum=0.0)
# reconcile: how long after dispatch a phase's host may still be starting up
ROLLMUX_DISPATCH_GRACE_S = env_float("ROLLMUX_DISPATCH_GRACE_S", 20.0, minimum=0.0)
# phase events commit without waiting for the WAL flush (reconcile re-applies a lost one)
ROLLMUX_ASYNC_COMMIT_PHASE_EVENTS = env_bool("ROLLMUX_ASYNC_COMMIT_PHASE_EVENTS", True)
# Empty: /metrics is open (serve it on an internal network); set: scrapers send it as a Bearer token.
ROLLMUX_METRICS_TOKEN = env_str("ROLLMUX_METRICS_TOKEN", "")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
X_FRAME_OPTIONS = "DENY"
