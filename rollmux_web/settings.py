"""Settings for the RollMux web app: one module, driven by the environment.

With nothing set it runs on SQLite with in-process tasks (no Redis), so `make run`
works on a fresh machine. `DATABASE_URL` switches to PostgreSQL and `REDIS_URL`
to a real Celery broker. Bad values stop the process with ImproperlyConfigured.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from urllib.parse import urlparse

import dj_database_url
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from scheduler.config import read_env as read_planner_env

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
    """Return a DATABASES entry for a postgres:// or sqlite:/// URL.

    dj-database-url does the parsing, so every query option (`?sslmode=require&
    connect_timeout=5`, ...) reaches the driver as OPTIONS; the checks before it turn the
    URLs it would misread into a clear ImproperlyConfigured.
    """
    parsed = urlparse(url)
    if parsed.scheme in ("postgres", "postgresql"):
        if not parsed.path.lstrip("/"):
            raise ImproperlyConfigured(f"DATABASE_URL {url!r} names no database")
        try:
            _ = parsed.port
        except ValueError:
            raise ImproperlyConfigured(f"DATABASE_URL {url!r} has a non-numeric port") from None
        db = dict(dj_database_url.parse(url, conn_max_age=60, conn_health_checks=True))
        db["PORT"] = str(db.get("PORT") or "")
        return db
    if parsed.scheme == "sqlite":
        if not url.startswith("sqlite:///") or url == "sqlite:///":
            raise ImproperlyConfigured(f"DATABASE_URL {url!r}: use sqlite:///path/to/file")
        return dict(dj_database_url.parse(url))
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


# Embedded (the default): make run, tests, a laptop. false = production: a real SECRET_KEY,
# HTTPS only (HSTS, secure cookies, redirect), /metrics behind its token.
EMBEDDED = env_bool("ROLLMUX_EMBEDDED", True)
ROLLMUX_EMBEDDED = EMBEDDED

_secret = os.environ.get("SECRET_KEY", "")
if not _secret:
    if DEBUG or EMBEDDED:
        # Embedded default (make run, tests): a per-checkout key under var/ (git-ignored).
        # Production sets SECRET_KEY; docker-compose refuses to start without it.
        _secret = embedded_secret_key(BASE_DIR / "var" / "secret_key")
    else:
        raise ImproperlyConfigured("SECRET_KEY must be set when ROLLMUX_EMBEDDED=false")
elif len(_secret) < 16:
    raise ImproperlyConfigured("SECRET_KEY is too short: use at least 16 characters")
elif not EMBEDDED and (len(_secret) < 50 or len(set(_secret)) < 5):
    # what `manage.py check --deploy` asks of a production key (security.W009)
    raise ImproperlyConfigured(
        "SECRET_KEY is too weak for ROLLMUX_EMBEDDED=false: use at least 50 random characters"
    )
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
    "axes",
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
    "rollmux_web.notifications",
    # the composition root: wires the web app's ports to the dispatchers and triggers
    "workers",
]

MIDDLEWARE = [
    "rollmux_web.health.middleware.HealthMiddleware",  # probes: before Host checks/redirects
    "rollmux_web.middleware.ErrorShapeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "rollmux_web.metrics.MetricsMiddleware",
    # last, as django-axes asks: it turns a lockout flagged during authenticate() into a 429
    "axes.middleware.AxesMiddleware",
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
                "rollmux_web.sso.context_processors.sso",
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
# PostgreSQL compiles a query whose estimated cost passes jit_above_cost (100,000) with
# LLVM: at a fleet's size the pages' id-array queries (the SLO report's jobs, the jobs
# that ran) pass it and spent 0.1-0.2 s each compiling, more than running (issue 25,
# docs/benchmarks.md). Off for RollMux's connections unless ROLLMUX_DB_JIT is set (or
# DATABASE_URL's `options` names jit itself).
ROLLMUX_DB_JIT = env_bool("ROLLMUX_DB_JIT", False)
if str(DATABASES["default"]["ENGINE"]).endswith("postgresql") and not ROLLMUX_DB_JIT:
    _db_options: dict[str, object] = DATABASES["default"].setdefault("OPTIONS", {})  # type: ignore[assignment]
    if "jit" not in str(_db_options.get("options", "")):
        _db_options["options"] = f"{_db_options.get('options', '')} -c jit=off".strip()
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# django-axes first: it refuses a locked-out username or address before the password is
# even checked (see "Logins and rate limits" in docs/api.md).
AUTHENTICATION_BACKENDS = [
    "rollmux_web.accounts.throttling.LoginLockoutBackend",
    # Django's password backend with the break-glass rule (ROLLMUX_PASSWORD_LOGIN)
    "rollmux_web.sso.backends.PasswordBackend",
]

# --- Single sign-on: OpenID Connect (mozilla-django-oidc; rollmux_web/sso) ---------------
OIDC_RP_CLIENT_ID = env_str("OIDC_RP_CLIENT_ID", "")
ROLLMUX_SSO = bool(OIDC_RP_CLIENT_ID)
OIDC_RP_CLIENT_SECRET = env_str("OIDC_RP_CLIENT_SECRET", "")
OIDC_OP_AUTHORIZATION_ENDPOINT = env_str("OIDC_OP_AUTHORIZATION_ENDPOINT", "")
OIDC_OP_TOKEN_ENDPOINT = env_str("OIDC_OP_TOKEN_ENDPOINT", "")
OIDC_OP_USER_ENDPOINT = env_str("OIDC_OP_USER_ENDPOINT", "")
OIDC_OP_JWKS_ENDPOINT = env_str("OIDC_OP_JWKS_ENDPOINT", "")
OIDC_RP_SIGN_ALGO = env_str("OIDC_RP_SIGN_ALGO", "RS256")
OIDC_RP_SCOPES = env_str("OIDC_RP_SCOPES", "openid email profile groups")
OIDC_TIMEOUT = env_float("OIDC_TIMEOUT", 10.0, minimum=1.0)
OIDC_AUTHENTICATION_CALLBACK_URL = "oidc_authentication_callback"
LOGIN_REDIRECT_URL_FAILURE = "/sso/failed/"
if ROLLMUX_SSO:
    _missing = [
        name
        for name in (
            "OIDC_RP_CLIENT_SECRET",
            "OIDC_OP_AUTHORIZATION_ENDPOINT",
            "OIDC_OP_TOKEN_ENDPOINT",
            "OIDC_OP_USER_ENDPOINT",
        )
        if not globals()[name]
    ]
    if OIDC_RP_SIGN_ALGO.startswith("RS") and not OIDC_OP_JWKS_ENDPOINT:
        _missing.append("OIDC_OP_JWKS_ENDPOINT")
    if _missing:
        raise ImproperlyConfigured(f"OIDC_RP_CLIENT_ID is set: also set {', '.join(_missing)}")
    AUTHENTICATION_BACKENDS.append("rollmux_web.sso.backends.OIDCBackend")
ROLLMUX_SSO_LABEL = env_str("ROLLMUX_SSO_LABEL", "Sign in with single sign-on")
# The claim rule (rollmux_web/sso/claims.py): which claims name the user, tenants and role.
ROLLMUX_OIDC_USERNAME_CLAIM = env_str("ROLLMUX_OIDC_USERNAME_CLAIM", "preferred_username")
ROLLMUX_OIDC_TENANTS_CLAIM = env_str("ROLLMUX_OIDC_TENANTS_CLAIM", "groups")
ROLLMUX_OIDC_TENANT_PATTERN = env_str(
    "ROLLMUX_OIDC_TENANT_PATTERN", r"^rollmux-tenant-(?P<tenant>[a-z0-9][a-z0-9_-]*)$"
)
ROLLMUX_OIDC_ROLE_CLAIM = env_str("ROLLMUX_OIDC_ROLE_CLAIM", "groups")
ROLLMUX_OIDC_ROLES = env_str("ROLLMUX_OIDC_ROLES", "rollmux-admins=admin,rollmux-finance=finance")
# "all": anyone may log in by password; "admins": only admins (break-glass), others use SSO
ROLLMUX_PASSWORD_LOGIN = env_str("ROLLMUX_PASSWORD_LOGIN", "all")
if ROLLMUX_PASSWORD_LOGIN not in ("all", "admins"):
    raise ImproperlyConfigured(
        f"Unexpected value ROLLMUX_PASSWORD_LOGIN={ROLLMUX_PASSWORD_LOGIN!r}: use all or admins"
    )

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
    "DEFAULT_SCHEMA_CLASS": "rollmux_web.api.schema.ErrorDocumentingAutoSchema",
    "DEFAULT_RENDERER_CLASSES": [
        "rollmux_web.api.renderers.JSONRenderer",
        "rollmux_web.api.renderers.BrowsableAPIRenderer",
    ],
    "DEFAULT_PARSER_CLASSES": [
        "rollmux_web.api.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    "DEFAULT_THROTTLE_CLASSES": [
        "rollmux_web.accounts.throttling.TokenRateThrottle",
        "rollmux_web.accounts.throttling.AnonRateThrottle",
    ],
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
CELERY_BROKER_URL = REDIS_URL or "memory://localhost/"  # a host: kombu warns without one
CELERY_RESULT_BACKEND = REDIS_URL or "cache+memory://"
# Embedded mode (no REDIS_URL): tasks run in-process, right after the commit that queues them.
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", not REDIS_URL)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# The Django fixup of Celery closes a worker's database connections after every task (a
# new PostgreSQL connection per phase event, on the switch path); with this it does so every
# that many tasks, and workers/connections.py closes what Django would (CONN_MAX_AGE, errors).
CELERY_DB_REUSE_MAX = env_int("CELERY_DB_REUSE_MAX", 1000, minimum=0)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A worker waits out a Redis outage however long it lasts (Celery's default gives up after
# 100 attempts, a minute and a half at workers/consumer.py's pace, and the worker exits).
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
# "priority": a worker consuming several queues takes from them in the order its -Q lists
# them (kombu's default rotates between them): the controller's phase events come first.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 300, "queue_order_strategy": "priority"}
CELERY_TASK_DEFAULT_QUEUE = "rollmux"
# Phase events (a phase's start, its end, a tail's hand-over of nodes) have a queue of their
# own, which the controller consumes before its other one (`-Q rollmux-phase,rollmux`): a
# finished phase never waits behind the planning passes and other tasks that submissions
# queue (issue 24 item 12; bench/api_submit.py measures it).
ROLLMUX_PHASE_QUEUE = "rollmux-phase"
# what the controller consumes, in this order (its -Q in bin/run.sh and docker-compose.yml)
ROLLMUX_CONTROLLER_QUEUES = [ROLLMUX_PHASE_QUEUE, CELERY_TASK_DEFAULT_QUEUE]
# What-if simulations are CPU-heavy and long: they get their own queue and worker, so a
# simulation never holds up the group controller's phase events (the switch path).
ROLLMUX_SIM_QUEUE = "rollmux-sim"
# Notification deliveries wait on other people's mail servers and webhooks: their own queue.
ROLLMUX_NOTIFY_QUEUE = "rollmux-notify"
CELERY_TASK_ROUTES = {
    "workers.tasks.phase_started": {"queue": ROLLMUX_PHASE_QUEUE},
    "workers.tasks.phase_finished": {"queue": ROLLMUX_PHASE_QUEUE},
    "workers.tasks.phase_tail": {"queue": ROLLMUX_PHASE_QUEUE},
    "reports.run_whatif": {"queue": ROLLMUX_SIM_QUEUE},
    "rollmux_web.notifications.tasks.*": {"queue": ROLLMUX_NOTIFY_QUEUE},
    # retention batches (Parquet writes, rollups) are background work: off the controller
    "rollmux_web.workflow.tasks.*": {"queue": ROLLMUX_SIM_QUEUE},
    "rollmux_web.reports.tasks.keep_cost_days": {"queue": ROLLMUX_SIM_QUEUE},
}
CELERY_BEAT_SCHEDULE = {
    "plan-safety-net": {"task": "workers.tasks.plan", "schedule": 30.0},
    "reconcile": {"task": "workers.tasks.reconcile", "schedule": 15.0},
    "notifications-sweep": {"task": "rollmux_web.notifications.tasks.sweep", "schedule": 60.0},
    "whatif-reconcile": {"task": "rollmux_web.reports.tasks.reconcile_whatif", "schedule": 30.0},
    # overdue phase reports (a lost message costs about a second of idle nodes)
    "watch": {"task": "workers.tasks.watch", "schedule": 1.0},
    # retention: archive old phase records in bounded batches, purge old rollups and audit
    "retention": {"task": "rollmux_web.workflow.tasks.retention_sweep", "schedule": 600.0},
    # each closed day's cost amounts, kept once behind the rollup watermark (the cost report
    # sums them: reports.cost_days)
    "cost-days": {"task": "rollmux_web.reports.tasks.keep_cost_days", "schedule": 600.0},
}
# reconnect to Redis within a second after an outage (kombu's default backs off to 30 s)
CELERY_WORKER_CONSUMER = "workers.consumer:QuickReconnectConsumer"

# --- Scheduling and execution ------------------------------------------------
# The planner's knobs (group size, objective, co-location, consolidation, drift re-planning,
# long-tail migration): one table, scheduler.config.OPTIONS (its defaults are the shipped
# PlannerConfig's; docs/planner-configuration.md is generated from it). Each row becomes the
# setting of its variable's name; rollmux_web.workflow.levers builds the live config from them.
try:
    _PLANNER = read_planner_env(os.environ)
except ValueError as exc:
    raise ImproperlyConfigured(str(exc)) from None
# named one by one so that type checkers and `settings.X` readers see them (a test checks
# that every row of the table is here)
ROLLMUX_MAX_GROUP_SIZE: int = _PLANNER["ROLLMUX_MAX_GROUP_SIZE"]
ROLLMUX_PLANNER_OBJECTIVE: str = _PLANNER["ROLLMUX_PLANNER_OBJECTIVE"]
ROLLMUX_PLANNER_PRUNE_SATURATED: bool = _PLANNER["ROLLMUX_PLANNER_PRUNE_SATURATED"]
ROLLMUX_COLOCATED: bool = _PLANNER["ROLLMUX_COLOCATED"]
ROLLMUX_COLOCATED_ON_ARRIVAL: bool = _PLANNER["ROLLMUX_COLOCATED_ON_ARRIVAL"]
ROLLMUX_TIGHT_SLACK: float = _PLANNER["ROLLMUX_TIGHT_SLACK"]
ROLLMUX_CONSOLIDATION: bool = _PLANNER["ROLLMUX_CONSOLIDATION"]
ROLLMUX_MAX_MOVES_PER_JOB: int = _PLANNER["ROLLMUX_MAX_MOVES_PER_JOB"]
ROLLMUX_DRIFT_REPLAN: bool = _PLANNER["ROLLMUX_DRIFT_REPLAN"]
ROLLMUX_DRIFT_TOLERANCE: float = _PLANNER["ROLLMUX_DRIFT_TOLERANCE"]
ROLLMUX_LONG_TAIL_THRESHOLD: float = _PLANNER["ROLLMUX_LONG_TAIL_THRESHOLD"]
# What-if runs (reports): refused at upload above the first three; a run is stopped (failed,
# with the limit named) above the last two; a tenant has at most so many runs waiting or
# running; a running run whose worker stopped beating is failed by the what-if reconcile.
ROLLMUX_WHATIF_MAX_JOBS = env_int("ROLLMUX_WHATIF_MAX_JOBS", 5000, minimum=1)
ROLLMUX_WHATIF_MAX_ITERATIONS = env_int("ROLLMUX_WHATIF_MAX_ITERATIONS", 100_000, minimum=1)
ROLLMUX_WHATIF_MAX_EVENTS = env_int("ROLLMUX_WHATIF_MAX_EVENTS", 5_000_000, minimum=1)
ROLLMUX_WHATIF_MAX_WALL_S = env_float("ROLLMUX_WHATIF_MAX_WALL_S", 900.0, minimum=1.0)
ROLLMUX_WHATIF_MAX_MEMORY_MB = env_int("ROLLMUX_WHATIF_MAX_MEMORY_MB", 2048, minimum=16)
ROLLMUX_WHATIF_MAX_QUEUED_PER_TENANT = env_int("ROLLMUX_WHATIF_MAX_QUEUED_PER_TENANT", 3, minimum=1)
ROLLMUX_WHATIF_STALE_S = env_float("ROLLMUX_WHATIF_STALE_S", 60.0, minimum=5.0)
ROLLMUX_SWITCH_OVERHEAD_S = env_float("ROLLMUX_SWITCH_OVERHEAD_S", 2.0, minimum=0.0)
# A rollout on the training GPU type takes its profiled time x this (the cluster spec's
# rollout speed factor of the training type: 1.0 is the trace-format spec's co-located
# assumption). The planner's co-located check uses it; the emulating runners sleep it.
ROLLMUX_ROLLOUT_SPEED_FACTOR = env_float("ROLLMUX_ROLLOUT_SPEED_FACTOR", 1.0, minimum=1e-6)
ROLLMUX_TIME_SCALE = env_float("ROLLMUX_TIME_SCALE", 20.0, minimum=1e-6)  # why: see seed_demo
ROLLMUX_MAX_ATTEMPTS = env_int("ROLLMUX_MAX_ATTEMPTS", 3, minimum=1)
# Planning passes start at most once per this many seconds (workers/plan_marker.py): a burst
# of submissions shares one pass per interval; a request after a quiet moment plans at once.
ROLLMUX_PLAN_MIN_INTERVAL_S = env_float("ROLLMUX_PLAN_MIN_INTERVAL_S", 0.5, minimum=0.0)
# A job submitted without phase times is profiled first: this many iterations alone at the
# maximum token length (the paper's one-shot profiler: one), each phase given this long
# (wall-clock) before reconcile calls it overrun (it has no worst case yet to scale).
ROLLMUX_PROFILE_ITERATIONS = env_int("ROLLMUX_PROFILE_ITERATIONS", 1, minimum=1)
ROLLMUX_PROFILE_PHASE_TIMEOUT_S = env_float("ROLLMUX_PROFILE_PHASE_TIMEOUT_S", 3600.0, minimum=1.0)
ROLLMUX_DISPATCHER = env_str("ROLLMUX_DISPATCHER", "ray")  # "ray" or "inline"
ROLLMUX_RAY_ADDRESS = env_str("ROLLMUX_RAY_ADDRESS", "local")
# Where job hosts write a checkpoint after each training phase (shared storage in production).
ROLLMUX_CHECKPOINT_DIR = env_str("ROLLMUX_CHECKPOINT_DIR", str(BASE_DIR / "var" / "checkpoints"))
# ... as a storage URI every Ray node can reach: object storage through pyarrow.fs
# (s3://bucket/prefix, gs://..., hdfs://...) or a shared directory; empty: the path above.
ROLLMUX_CHECKPOINT_URI = env_str("ROLLMUX_CHECKPOINT_URI", "")
# --- Retention and archives (issue 25; docs/operations.md "Retention and archives") ----
# Phase records and iteration metrics of jobs that ended more than this many days ago go to
# Parquet under ROLLMUX_ARCHIVE_URI (pyarrow.fs: a directory, file://, s3://, gs://, ...),
# partitioned by month, and are deleted; daily rollups keep what the reports need for
# ROLLMUX_ROLLUP_RETENTION_MONTHS. 0 turns archiving off.
ROLLMUX_PHASE_RETENTION_DAYS = env_int("ROLLMUX_PHASE_RETENTION_DAYS", 90, minimum=0)
ROLLMUX_ROLLUP_RETENTION_MONTHS = env_int("ROLLMUX_ROLLUP_RETENTION_MONTHS", 24, minimum=0)
ROLLMUX_ARCHIVE_URI = env_str("ROLLMUX_ARCHIVE_URI", str(BASE_DIR / "var" / "archive"))
ROLLMUX_ARCHIVE_BATCH_PHASES = env_int("ROLLMUX_ARCHIVE_BATCH_PHASES", 20_000, minimum=1)
# the audit log's own retention (days; 0: kept for good)
ROLLMUX_AUDIT_RETENTION_DAYS = env_int("ROLLMUX_AUDIT_RETENTION_DAYS", 0, minimum=0)
# The longest ranges these would break: the budgets' month (and its burn-down, the quota
# page's month) reads raw phase records of the current month, and a report spans up to
# 366 days (reports.selectors._time.MAX_RANGE_DAYS) that must be on raw rows or rollups.
RETENTION_MIN_PHASE_DAYS = 62
RETENTION_MIN_ROLLUP_MONTHS = 13
if 0 < ROLLMUX_PHASE_RETENTION_DAYS < RETENTION_MIN_PHASE_DAYS:
    raise ImproperlyConfigured(
        f"ROLLMUX_PHASE_RETENTION_DAYS={ROLLMUX_PHASE_RETENTION_DAYS} is below"
        f" {RETENTION_MIN_PHASE_DAYS}: the budgets and quotas read this month's and last"
        " month's phase records (0 turns archiving off)"
    )
if ROLLMUX_PHASE_RETENTION_DAYS and ROLLMUX_ROLLUP_RETENTION_MONTHS < RETENTION_MIN_ROLLUP_MONTHS:
    raise ImproperlyConfigured(
        f"ROLLMUX_ROLLUP_RETENTION_MONTHS={ROLLMUX_ROLLUP_RETENTION_MONTHS} is below"
        f" {RETENTION_MIN_ROLLUP_MONTHS}: a cost or SLO report spans up to 366 days, read"
        " from the rollups before ROLLMUX_PHASE_RETENTION_DAYS"
    )
if 0 < ROLLMUX_AUDIT_RETENTION_DAYS < 31 * ROLLMUX_ROLLUP_RETENTION_MONTHS:
    raise ImproperlyConfigured(
        f"ROLLMUX_AUDIT_RETENTION_DAYS={ROLLMUX_AUDIT_RETENTION_DAYS} is below the rollups'"
        f" {ROLLMUX_ROLLUP_RETENTION_MONTHS} months ({31 * ROLLMUX_ROLLUP_RETENTION_MONTHS}"
        " days): the SLO report reads each job's SLO class at admission from the audit log"
        " (0 keeps it for good)"
    )
# The weight sync's links (Gbit/s): between the pools, and inside the rollout pool. The
# planner's sync estimate for a job that has not run yet (rollmux_web/workflow/sync.py).
ROLLMUX_CROSS_POOL_GBPS = env_float("ROLLMUX_CROSS_POOL_GBPS", 20.0, minimum=1e-6)
ROLLMUX_IN_POOL_GBPS = env_float("ROLLMUX_IN_POOL_GBPS", 400.0, minimum=1e-6)
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

# --- Notifications (rollmux_web/notifications) -----------------------------------
# Mail goes through SMTP from the environment; without EMAIL_HOST it is printed to the log.
EMAIL_HOST = env_str("EMAIL_HOST", "")
EMAIL_BACKEND = env_str(
    "EMAIL_BACKEND",
    "django.core.mail.backends.smtp.EmailBackend"
    if EMAIL_HOST
    else "django.core.mail.backends.console.EmailBackend",
)
EMAIL_PORT = env_int("EMAIL_PORT", 587 if env_bool("EMAIL_USE_TLS", False) else 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10, minimum=1)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "rollmux@localhost")
# The site's public URL, for links in notifications (e.g. https://rollmux.example.internal).
ROLLMUX_PUBLIC_URL = env_str("ROLLMUX_PUBLIC_URL", "")
ROLLMUX_NOTIFY_MAX_ATTEMPTS = env_int("ROLLMUX_NOTIFY_MAX_ATTEMPTS", 6, minimum=1)
ROLLMUX_NOTIFY_BACKOFF_S = env_float("ROLLMUX_NOTIFY_BACKOFF_S", 30.0, minimum=0.0)
ROLLMUX_NOTIFY_BACKOFF_MAX_S = env_float("ROLLMUX_NOTIFY_BACKOFF_MAX_S", 3600.0, minimum=0.0)
# Per user (the subscriptions' owner): test and confirmation sends an hour, deliveries an
# hour (the rest are logged as not sent), subscriptions, and email addresses awaiting
# confirmation (nothing but the confirmation is sent to an address until it is confirmed).
ROLLMUX_NOTIFY_TESTS_PER_HOUR = env_int("ROLLMUX_NOTIFY_TESTS_PER_HOUR", 10, minimum=1)
ROLLMUX_NOTIFY_DELIVERIES_PER_HOUR = env_int("ROLLMUX_NOTIFY_DELIVERIES_PER_HOUR", 300, minimum=1)
ROLLMUX_NOTIFY_MAX_SUBSCRIPTIONS = env_int("ROLLMUX_NOTIFY_MAX_SUBSCRIPTIONS", 20, minimum=1)
ROLLMUX_NOTIFY_MAX_UNCONFIRMED = env_int("ROLLMUX_NOTIFY_MAX_UNCONFIRMED", 3, minimum=1)
# Webhooks to loopback/private addresses are refused (no user may make the server call its
# own network) unless this is set (a receiver on the same private network, tests).
ROLLMUX_WEBHOOK_ALLOW_PRIVATE = env_bool("ROLLMUX_WEBHOOK_ALLOW_PRIVATE", False)
# Fair share across tenants (issue 22, docs/quotas-and-cost.md "Fair share"): the queue is ordered by
# priority, then each tenant's weighted share (usage decayed with this half-life, what it
# holds now, an entry penalty), then submission time; a job within its tenant's nominal
# quota that cannot be placed preempts jobs on borrowed capacity at their next iteration
# boundary (a checkpoint, then a yield) once they ran ROLLMUX_PREEMPT_MIN_RUN_S, after
# waiting up to ROLLMUX_PREEMPT_GRACE_S for a departure that frees the same capacity.
ROLLMUX_FAIR_SHARE = env_bool("ROLLMUX_FAIR_SHARE", True)
ROLLMUX_FAIR_SHARE_HALF_LIFE_S = env_float(
    "ROLLMUX_FAIR_SHARE_HALF_LIFE_S", 7 * 24 * 3600.0, minimum=1.0
)
ROLLMUX_PREEMPTION = env_bool("ROLLMUX_PREEMPTION", True)
ROLLMUX_PREEMPT_MIN_RUN_S = env_float("ROLLMUX_PREEMPT_MIN_RUN_S", 1800.0, minimum=0.0)
ROLLMUX_PREEMPT_GRACE_S = env_float("ROLLMUX_PREEMPT_GRACE_S", 600.0, minimum=0.0)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # embedded (eager) Celery logs every task of the beat, several a second, at INFO;
        # a real worker keeps its own per-task lines (`celery worker -l info`)
        **({"celery.app.trace": {"level": "WARNING"}} if EMBEDDED else {}),
    },
}

# --- HTTPS and browser security -------------------------------------------------------
# Production (ROLLMUX_EMBEDDED=false) is HTTPS only and passes `manage.py check --deploy`
# (CI runs it). Behind a proxy that terminates TLS set ROLLMUX_TLS_PROXY=true: the proxy
# must then set X-Forwarded-Proto (and overwrite any value the client sent).
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if env_bool("ROLLMUX_TLS_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    USE_X_FORWARDED_HOST = env_bool("ROLLMUX_USE_X_FORWARDED_HOST", False)
SECURE_SSL_REDIRECT = env_bool("ROLLMUX_SECURE_SSL_REDIRECT", not EMBEDDED)
# Prometheus and health probes scrape over the internal network, often in plain HTTP.
SECURE_REDIRECT_EXEMPT = [r"^metrics$", r"^health"]
SECURE_HSTS_SECONDS = env_int("ROLLMUX_HSTS_SECONDS", 0 if EMBEDDED else 31_536_000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("ROLLMUX_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("ROLLMUX_HSTS_PRELOAD", True)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool("ROLLMUX_SECURE_COOKIES", not EMBEDDED)
# A strict policy: every script and style is a file under /static/ (htmx included, no CDN),
# no inline script, style or event handler anywhere, no eval.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}

# --- Login throttling (django-axes) and API rate limits (DRF) ---------------------------
# Failed logins are counted per username and, separately, per client address, on the login
# form, the Django admin and POST /api/v1/auth/token/ alike (all go through authenticate()):
# after AXES_FAILURE_LIMIT failures that username, or that address, gets 429 until the
# cool-off has passed, even with the right password. Each lockout is in the audit log.
AXES_FAILURE_LIMIT = env_int("ROLLMUX_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = env_float("ROLLMUX_LOGIN_COOLOFF_MINUTES", 15.0, minimum=0.1) / 60.0
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_HTTP_RESPONSE_CODE = 429
AXES_LOCKOUT_CALLABLE = "rollmux_web.accounts.throttling.lockout_response"
AXES_VERBOSE = False
# The client address: REMOTE_ADDR, or behind a TLS proxy the address it appends last to
# X-Forwarded-For (the only entry a client cannot forge).
AXES_CLIENT_IP_CALLABLE = "rollmux_web.accounts.throttling.client_ip"
# Per-token request rate on the API ("" = no limit); anonymous requests (the token
# endpoint) get their own, per address. Counters live in the cache (Redis when set).
ROLLMUX_API_TOKEN_RATE = env_str("ROLLMUX_API_TOKEN_RATE", "6000/min")
ROLLMUX_API_ANON_RATE = env_str("ROLLMUX_API_ANON_RATE", "120/min")
# API tokens expire (0 = never); `rollmux login` reuses a live CLI token of the user and
# keeps at most ROLLMUX_CLI_TOKENS_PER_USER of them (the oldest are revoked).
ROLLMUX_TOKEN_TTL_DAYS = env_float("ROLLMUX_TOKEN_TTL_DAYS", 90.0, minimum=0.0)
ROLLMUX_CLI_TOKENS_PER_USER = env_int("ROLLMUX_CLI_TOKENS_PER_USER", 5, minimum=1)
# last_used_at is written at most once per this many seconds per token (no write per GET).
ROLLMUX_TOKEN_TOUCH_S = env_float("ROLLMUX_TOKEN_TOUCH_S", 60.0, minimum=0.0)

# The cache holds the rate-limit counters: shared by every process in production (Redis),
# per process when embedded (make run, tests).
CACHE_URL = env_str("ROLLMUX_CACHE_URL", "" if EMBEDDED else REDIS_URL)
# A Redis that does not answer costs a request at most a second (then the throttles fail
# open: rollmux_web/accounts/throttling.py).
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": CACHE_URL,
        "OPTIONS": {"socket_connect_timeout": 1.0, "socket_timeout": 1.0},
    }
    if CACHE_URL
    else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
}
