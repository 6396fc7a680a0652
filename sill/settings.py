"""Sill's one settings module, read from the environment (see README "Configuration")."""

from __future__ import annotations

import base64
import ipaddress
import logging
import os
import re
import sys
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from sill.env import (
    env_bool,
    env_float,
    env_int,
    env_list,
    env_log_level,
    env_path,
    env_str,
    env_url,
)

BASE_DIR = Path(__file__).resolve().parent.parent
TESTING = "pytest" in sys.modules or env_bool("SILL_TESTING")

DEBUG = env_bool("DEBUG", default=False)
SILL_DATA_DIR = env_path("SILL_DATA_DIR", BASE_DIR / "var")
SILL_DATA_DIR.mkdir(parents=True, exist_ok=True)
PORT = env_int("PORT", 8000)
# Where people reach Sill: used for links in emails and Slack messages.
SILL_BASE_URL = env_url("SILL_BASE_URL", f"http://127.0.0.1:{PORT}")
# Member invitations (sill/accounts/invites.py): how long an emailed link works, and how long a
# password-reset link does (Django's PASSWORD_RESET_TIMEOUT, in seconds).
SILL_INVITE_HOURS = env_int("SILL_INVITE_HOURS", 72)
PASSWORD_RESET_TIMEOUT = env_int("SILL_PASSWORD_RESET_SECONDS", 2 * 3600)
# Password reset: emails per mailbox per hour, and requests per client address per hour.
SILL_PASSWORD_RESET_PER_HOUR = env_int("SILL_PASSWORD_RESET_PER_HOUR", 5)
SILL_PASSWORD_RESET_ADDRESS_PER_HOUR = env_int("SILL_PASSWORD_RESET_ADDRESS_PER_HOUR", 30)
# Settings → Rails' "Test connection": how long it waits for the provider.
SILL_RAIL_CHECK_TIMEOUT_SECONDS = env_int("SILL_RAIL_CHECK_TIMEOUT_SECONDS", 5)
# A refund decision's fact reads from the rail (sill/rails/fact_reads.py): how long each waits.
# A read without an answer by then leaves its facts unknown, and rules hold or deny.
SILL_RAIL_FACT_TIMEOUT_SECONDS = env_float("SILL_RAIL_FACT_TIMEOUT_SECONDS", 3.0)
# GET /readyz (sill/health.py): how long it waits for all its checks together, which run at once;
# one still running then is reported failing ("timed out"). Under a load balancer's own timeout.
SILL_READYZ_SECONDS = env_float("SILL_READYZ_SECONDS", 4.0)
if not 0 < SILL_READYZ_SECONDS <= 60:
    raise ImproperlyConfigured("SILL_READYZ_SECONDS is more than 0 and at most 60")

_secret = env_str("SILL_SECRET_KEY")
if _secret is None:
    if not (DEBUG or TESTING):
        raise ImproperlyConfigured("SILL_SECRET_KEY must be set when DEBUG is off")
    _secret = "django-insecure-development-only-" + "x" * 40
SECRET_KEY = _secret
# Earlier secret keys, newest first, kept while a rotation completes: Django still accepts
# what they signed, and rail credentials encrypted under them stay readable until re-encrypted
# (sill/rails/secrets.py, `manage.py rails reencrypt-secrets`). Keys cannot contain commas.
SECRET_KEY_FALLBACKS = env_list("SILL_SECRET_KEY_FALLBACKS", [])

ALLOWED_HOSTS = env_list("SILL_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("SILL_CSRF_TRUSTED_ORIGINS", [])

# Whether any rail may move real money (live Stripe keys). Off unless explicitly set.
SILL_ALLOW_LIVE = env_bool("SILL_ALLOW_LIVE", default=False)
# Ed25519 seed (base64url, 32 bytes) that signs audit records; generated under the data dir
# in development when unset (see audit.keys).
SILL_AUDIT_SIGNING_KEY = env_str("SILL_AUDIT_SIGNING_KEY")
if SILL_AUDIT_SIGNING_KEY is not None:
    # Read it now, as audit.keys will: a bad seed would otherwise start every process and
    # fail each audit append (so every decision) on first use.
    _seed_text = SILL_AUDIT_SIGNING_KEY.strip()
    try:
        _seed = base64.urlsafe_b64decode(_seed_text + "=" * (-len(_seed_text) % 4))
    except ValueError:
        _seed = b""
    if len(_seed) != 32:
        raise ImproperlyConfigured(
            "SILL_AUDIT_SIGNING_KEY must be a base64url-encoded 32-byte ed25519 seed"
        )
# Transparency log (audit/checkpoints.py): each site's log is named
# "<SILL_AUDIT_ORIGIN>/<site id>" in its checkpoints; beat signs a checkpoint every N minutes
# when the log has grown, and copies each one to a directory and/or POSTs it to an HTTPS
# endpoint (text/plain), so a copy lives outside Sill's own database.
SILL_AUDIT_ORIGIN = env_str("SILL_AUDIT_ORIGIN", "sill.example/audit")
# It is each checkpoint's key name too, which c2sp.org/signed-note keeps free of spaces and '+'
# (audit.note refuses to sign under such a name: every checkpoint run would fail).
if (
    not SILL_AUDIT_ORIGIN
    or "+" in SILL_AUDIT_ORIGIN
    or not SILL_AUDIT_ORIGIN.isprintable()
    or any(c.isspace() for c in SILL_AUDIT_ORIGIN)
):
    raise ImproperlyConfigured(
        "SILL_AUDIT_ORIGIN must be a log name without spaces, control characters or '+' "
        "(e.g. refunds.example.com/audit)"
    )
SILL_AUDIT_CHECKPOINT_MINUTES = env_int("SILL_AUDIT_CHECKPOINT_MINUTES", 5)
SILL_AUDIT_CHECKPOINT_DIR = env_str("SILL_AUDIT_CHECKPOINT_DIR")
SILL_AUDIT_CHECKPOINT_URL = env_str("SILL_AUDIT_CHECKPOINT_URL")
# A rotated audit key starts signing this many seconds after `audit rotate-key` (every
# process reloads the key list well within it), so no record is signed outside its key's window.
# Processes reload it every 15 s (audit.keys.RELOAD_SECONDS): a shorter switch would let one
# still holding the old list sign past the old key's window, and the log fail verification.
SILL_AUDIT_KEY_SWITCH_SECONDS = env_int("SILL_AUDIT_KEY_SWITCH_SECONDS", 60)
if SILL_AUDIT_KEY_SWITCH_SECONDS < 30:
    raise ImproperlyConfigured(
        "SILL_AUDIT_KEY_SWITCH_SECONDS must be at least 30 (twice the 15 s every process takes "
        "to see a rotated audit key)"
    )
# Slack approvals (refunds/review/slack.py): the only hosts a click's response_url may name.
SILL_SLACK_RESPONSE_HOSTS = tuple(
    (env_str("SILL_SLACK_RESPONSE_HOSTS", "hooks.slack.com") or "").split(",")
)
# Slack's Web API (users.info, refunds/review/slack_users.py); tests point it at a loopback stub.
SILL_SLACK_API_URL = env_str("SILL_SLACK_API_URL", "https://slack.com/api/") or ""

INSTALLED_APPS = [
    # Django's admin with Sill's site class (sill/admin.py): superusers only, mounted only
    # with SILL_ADMIN=1 (sill/urls.py).
    "sill.apps.SillAdminConfig",
    # Before django.contrib.auth: its `changepassword` is Sill's, which signs the change
    # (sill/operator/management/commands/changepassword.py).
    "sill.operator.apps.OperatorConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    # django-qsessions replaces django.contrib.sessions: sessions with their user, agent and
    # address (sill/accounts/sessions.py).
    "qsessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django_htmx",
    "template_partials",
    "rest_framework",
    "drf_spectacular",
    "django_celery_beat",
    "treebeard",
    "axes",
    "csp",
    # Two-factor authentication (sill/accounts/two_factor.py): TOTP authenticators and
    # recovery codes (a static device whose tokens are stored as keyed hashes).
    "django_otp",
    "django_otp.plugins.otp_totp",
    "django_otp.plugins.otp_static",
    "sill.accounts",
    "sill.orders",
    "sill.rails",
    "refunds",
    "policies",
    "audit",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # /healthz and /readyz for load balancers: answered here, before sessions, members, CSRF
    # and the cache's guards (sill/health.py).
    "sill.health.HealthCheckMiddleware",
    "csp.middleware.CSPMiddleware",
    "sill.middleware.PermissionsPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "qsessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "sill.middleware.RefuseNulMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # request.user.is_verified(): whether this session entered a second factor.
    "django_otp.middleware.OTPMiddleware",
    # Times in the member's current site's zone (Site.timezone).
    "sill.middleware.SiteTimeZoneMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "sill.accounts.sessions.SessionTimeoutMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # A view failing because the cache cannot be reached: 503 with Retry-After, not a 500.
    "sill.cache_down.CacheUnreachableMiddleware",
    # Last: it turns a login that django-axes refused into the lockout page (429).
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "sill.urls"
WSGI_APPLICATION = "sill.wsgi.application"

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
                "sill.accounts.context_processors.site_context_processor",
                "refunds.review.context_processors.held_count",
            ],
            "builtins": ["sill.templatetags.sill"],
        },
    }
]

# --- Database -------------------------------------------------------------------------------
_database_url = env_str("DATABASE_URL")
if _database_url:
    DATABASES = {"default": dj_database_url.parse(_database_url, conn_max_age=60)}
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
        # libpq waits for a connection as long as the kernel does (minutes, for a host that
        # drops packets): a request, and /readyz's database check, gives up after 5 s instead.
        # ``?connect_timeout=N`` in DATABASE_URL sets another.
        DATABASES["default"].setdefault("OPTIONS", {}).setdefault("connect_timeout", 5)
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(SILL_DATA_DIR / "sill.sqlite3"),
            # IMMEDIATE transactions + WAL: a web process and a worker can both write without
            # "database is locked" (writers queue on the busy timeout instead of failing at
            # the lock upgrade of a DEFERRED transaction).
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
            # A file, not :memory:, so a worker process in the integration tests sees it; one
            # per test run, so two suites on one machine never share (or delete) it.
            "TEST": {"NAME": str(SILL_DATA_DIR / f"test-{os.getpid()}.sqlite3")},
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# Limits set on every PostgreSQL session (sill/database_down.py), in seconds, 0 for none: how
# long a statement waits for a lock another session holds before it gives up (the request is
# answered 503 unavailable), and how long a session may sit idle inside a transaction before
# PostgreSQL ends it and releases its locks.
SILL_DB_LOCK_TIMEOUT_SECONDS = env_int("SILL_DB_LOCK_TIMEOUT_SECONDS", 10)
# Off by default in the tests: pytest-django runs each test inside a transaction of its own,
# which sits idle while the test waits on a subprocess, a worker or a browser (a minute, for a
# test that waits out an audit key switch); the tests of the limit set it.
SILL_DB_IDLE_IN_TRANSACTION_SECONDS = env_int(
    "SILL_DB_IDLE_IN_TRANSACTION_SECONDS", 0 if TESTING else 60
)
if min(SILL_DB_LOCK_TIMEOUT_SECONDS, SILL_DB_IDLE_IN_TRANSACTION_SECONDS) < 0:
    raise ImproperlyConfigured(
        "SILL_DB_LOCK_TIMEOUT_SECONDS and SILL_DB_IDLE_IN_TRANSACTION_SECONDS are >= 0"
    )

# --- Cache ----------------------------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL")
# How long a cache call waits for Redis to take the connection, then to answer (seconds). A Redis
# host that drops packets instead of refusing them would otherwise hold each request until the
# kernel gives up on the connection (minutes); past these the call raises redis' TimeoutError,
# which the request answers as "503 unavailable" (sill/cache_down.py). Redis answers a rate
# limit's counter in well under a millisecond: these are for an outage, not for load.
SILL_REDIS_CACHE_OPTIONS = {"socket_connect_timeout": 2.0, "socket_timeout": 2.0}
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "OPTIONS": SILL_REDIS_CACHE_OPTIONS,
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# --- Celery ---------------------------------------------------------------------------------
# What a worker does with a task when it dies differs by broker (README "Workers, brokers and
# redelivery"); the beat sweep `refunds.recover_stuck` is the backstop for both.
#
# Time limits: past the soft limit a task gets SoftTimeLimitExceeded (an unexpected exception:
# execution treats it as ambiguous once the rail may have been called); past the hard limit a
# prefork child is killed and its message acknowledged, not redelivered, so a hung rail call
# cannot loop. The solo pool enforces neither.
SILL_TASK_MAX_RUNTIME_SECONDS = env_int("SILL_TASK_MAX_RUNTIME_SECONDS", 300)
# Activity's "Verify chain" runs as long as the site's log takes (audit.tasks), up to this.
SILL_AUDIT_VERIFY_MAX_SECONDS = env_int("SILL_AUDIT_VERIFY_MAX_SECONDS", 6 * 3600)
CELERY_TASK_TIME_LIMIT = SILL_TASK_MAX_RUNTIME_SECONDS
CELERY_TASK_SOFT_TIME_LIMIT = max(1, SILL_TASK_MAX_RUNTIME_SECONDS * 9 // 10)
# The longest countdown a retry waits: refunds.execute and orders.charge back off up to
# SILL_EXECUTION_BACKOFF_CAP_SECONDS and SILL_CHARGE_BACKOFF_CAP_SECONDS (the variables and
# defaults refunds/ reads), tasks with `retry_backoff` up to Celery's retry_backoff_max, 600 s.
SILL_TASK_MAX_COUNTDOWN_SECONDS = max(
    env_int("SILL_EXECUTION_BACKOFF_CAP_SECONDS", 300),
    env_int("SILL_CHARGE_BACKOFF_CAP_SECONDS", 300),
    600,
)
# Redis keeps every delivered message in its `unacked` set until the worker acknowledges it
# (late: after the task ran) and puts it back on the queue once it is older than the visibility
# timeout. A retry's message is delivered at once and held unacked until its countdown is over,
# so the timeout must exceed the longest task plus the longest countdown, or Redis hands a
# running or waiting task to a second worker. It is also how long a killed worker's task waits
# before it is delivered again. SILL_BROKER_VISIBILITY_TIMEOUT overrides it (tests use 5 s).
SILL_BROKER_VISIBILITY_TIMEOUT = env_int(
    "SILL_BROKER_VISIBILITY_TIMEOUT",
    SILL_TASK_MAX_RUNTIME_SECONDS + SILL_TASK_MAX_COUNTDOWN_SECONDS + 60,
)
# The broker: SILL_BROKER_URL when set ("filesystem://" forces the embedded one even with
# REDIS_URL, which then still serves the cache), else Redis at REDIS_URL, else embedded.
SILL_BROKER_URL = env_str("SILL_BROKER_URL") or REDIS_URL or "filesystem://"
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object]
if not SILL_BROKER_URL.startswith("filesystem:"):
    CELERY_BROKER_URL = SILL_BROKER_URL
    if SILL_BROKER_URL.startswith(("redis://", "rediss://")):
        # kombu's Redis transport, with one client per channel rather than per publish.
        CELERY_BROKER_TRANSPORT = "sill.broker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": SILL_BROKER_VISIBILITY_TIMEOUT,
        # kombu scans for expired unacked messages every interval x throttle seconds (10 x 10
        # by default); scan on every tick so redelivery comes within ~10 s of the timeout.
        "unacked_restore_interval": max(1, min(10, SILL_BROKER_VISIBILITY_TIMEOUT // 5)),
        "unacked_restore_throttle": 1,
        # A publish waits this long for Redis to take the connection, then to answer (kombu
        # waits forever by default): a broker host that drops packets fails the publish (the
        # request answers, the beat sweeps send it later: sill/queue.py) rather than holding
        # the request. Well above BRPOP's one second, which a worker's reads wait on.
        "socket_connect_timeout": 2.0,
        "socket_timeout": 5.0,
    }
else:
    # Embedded broker: kombu's filesystem transport under the data dir; no server needed. A
    # fetched message's file is deleted at once and the message then lives only in the worker's
    # memory: a killed worker process takes it along (nothing redelivers it; the sweep does).
    # Tests get a broker folder of their own run (passed on to their worker processes).
    _broker = env_path(
        "SILL_BROKER_DIR",
        SILL_DATA_DIR / (f"broker-test-{os.getpid()}" if TESTING else "broker"),
    )
    _broker.mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = "filesystem://localhost//"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker),
        "data_folder_out": str(_broker),
        # Exchange tables travel with the queue folder (kombu's default is ./control).
        "control_folder": str(_broker / "control"),
        # Not kept: with store_processed off, kombu moves a fetched file to the system temp
        # folder and deletes it there.
        "store_processed": False,
    }
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TASK_ALWAYS_EAGER = env_bool("SILL_CELERY_EAGER", default=False)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# How long one execution holds a refund before recovery may try again (same idempotency key),
# and how old an unheld processing refund must be before the beat sweep re-enqueues it.
SILL_EXECUTION_LEASE_SECONDS = env_int("SILL_EXECUTION_LEASE_SECONDS", 120)
SILL_RECOVER_AFTER_SECONDS = env_int("SILL_RECOVER_AFTER_SECONDS", 60)
# Bounded retries of one refund's execution (refunds/execution.py): at most this many attempts
# and this long since the first; backoff with full jitter, uniform in
# [0, min(cap, base x 2^retry)]. Past the bounds the refund needs attention, never "failed".
SILL_EXECUTION_MAX_ATTEMPTS = env_int("SILL_EXECUTION_MAX_ATTEMPTS", 8)
SILL_EXECUTION_MAX_SECONDS = env_int("SILL_EXECUTION_MAX_SECONDS", 3600)
SILL_EXECUTION_BACKOFF_BASE_SECONDS = env_float("SILL_EXECUTION_BACKOFF_BASE_SECONDS", 2.0)
SILL_EXECUTION_BACKOFF_CAP_SECONDS = env_int("SILL_EXECUTION_BACKOFF_CAP_SECONDS", 300)
# How often the beat task asks the rail again about a refund that needs attention.
SILL_ATTENTION_RECHECK_SECONDS = env_int("SILL_ATTENTION_RECHECK_SECONDS", 300)
# Reconciliation (refunds/reconcile/runs.py): every this many minutes per rail account, compare
# the refunds of the charges active in the last N days with the rail's, at most this many
# charges a run (the next run goes on where it stopped).
SILL_RECONCILE_DAYS = env_int("SILL_RECONCILE_DAYS", 7)
SILL_RECONCILE_EVERY_MINUTES = env_int("SILL_RECONCILE_EVERY_MINUTES", 60)
SILL_RECONCILE_MAX_CHARGES = env_int("SILL_RECONCILE_MAX_CHARGES", 500)
# A run stops between charges once it has run this long (the next run goes on from there),
# well inside the task's soft time limit: the charge being read when the budget runs out may
# take a rail timeout or two more, and past the soft limit the run's last charge is lost.
SILL_RECONCILE_MAX_SECONDS = env_int(
    "SILL_RECONCILE_MAX_SECONDS", max(1, SILL_TASK_MAX_RUNTIME_SECONDS // 2)
)
# A purchase mandate's charge (sill/orders/charging.py): the same bounds as a refund's
# execution, its lease the execution's unless set.
SILL_CHARGE_LEASE_SECONDS = env_int("SILL_CHARGE_LEASE_SECONDS", SILL_EXECUTION_LEASE_SECONDS)
SILL_CHARGE_MAX_ATTEMPTS = env_int("SILL_CHARGE_MAX_ATTEMPTS", 8)
SILL_CHARGE_BACKOFF_BASE_SECONDS = env_float("SILL_CHARGE_BACKOFF_BASE_SECONDS", 2.0)
SILL_CHARGE_BACKOFF_CAP_SECONDS = env_int("SILL_CHARGE_BACKOFF_CAP_SECONDS", 300)
SILL_CHARGE_ATTENTION_RECHECK_SECONDS = env_int("SILL_CHARGE_ATTENTION_RECHECK_SECONDS", 900)
# Stored webhook events whose processing failed (sill/rails/event_attempts.py): tried again
# once the last attempt is this old, at most this many attempts. A transient failure (a lost
# connection, a lock timeout, Shopify throttling) gives its attempt back while the event is
# younger than the grace; after it, it counts like any other, so one that never passes ends
# in a loud give-up instead of being retried for good.
SILL_WEBHOOK_RETRY_AFTER_SECONDS = env_int("SILL_WEBHOOK_RETRY_AFTER_SECONDS", 300)
SILL_WEBHOOK_MAX_ATTEMPTS = env_int("SILL_WEBHOOK_MAX_ATTEMPTS", 5)
SILL_WEBHOOK_TRANSIENT_GRACE_SECONDS = env_int("SILL_WEBHOOK_TRANSIENT_GRACE_SECONDS", 3600)
# How long Sill waits for one call to a store's API.
SILL_SHOPIFY_TIMEOUT_SECONDS = env_float("SILL_SHOPIFY_TIMEOUT_SECONDS", 20.0)
# How long one Shopify order sync waits for Shopify's rate limit in all before it stops.
SILL_SHOPIFY_SYNC_THROTTLE_SECONDS = env_float("SILL_SHOPIFY_SYNC_THROTTLE_SECONDS", 300.0)
SILL_PAYPAL_TIMEOUT_SECONDS = env_float("SILL_PAYPAL_TIMEOUT_SECONDS", 20.0)
SILL_WOOCOMMERCE_TIMEOUT_SECONDS = env_float("SILL_WOOCOMMERCE_TIMEOUT_SECONDS", 20.0)

# --- Auth, sessions, security ---------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
if TESTING:
    # Hashing cost is not what the tests are about.
    PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
LOGIN_URL = "accounts:login"
LOGIN_REDIRECT_URL = "orders:dashboard"
LOGOUT_REDIRECT_URL = "accounts:login"

# Sessions (sill/accounts/sessions.py): signed out after this long without a request, and
# this long after signing in whatever happens. The cookie and the session row outlive the idle
# limit by the last-seen granularity only; `manage.py clearsessions` deletes expired rows.
SESSION_ENGINE = "sill.accounts.session_store"
SILL_SESSION_IDLE_SECONDS = env_int("SILL_SESSION_IDLE_SECONDS", 2 * 3600)
SILL_SESSION_MAX_SECONDS = env_int("SILL_SESSION_MAX_SECONDS", 12 * 3600)
if SILL_SESSION_IDLE_SECONDS < 60 or SILL_SESSION_MAX_SECONDS < 60:
    raise ImproperlyConfigured("SILL_SESSION_IDLE_SECONDS and SILL_SESSION_MAX_SECONDS are >= 60")
SESSION_COOKIE_AGE = SILL_SESSION_IDLE_SECONDS + 60
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_HTTPONLY = False  # htmx reads no cookie; CSRF goes in hx-headers from the page.
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
# A load balancer's health checks often come over plain HTTP to the instance: answered, not
# redirected, whenever SILL_SSL_REDIRECT is on (sill/health.py).
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]

if not DEBUG and not TESTING:
    SESSION_COOKIE_SECURE = env_bool("SILL_SECURE_COOKIES", default=True)
    CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
    SECURE_SSL_REDIRECT = env_bool("SILL_SSL_REDIRECT", default=True)
    SECURE_HSTS_SECONDS = env_int("SILL_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True

# --- Proxy, login throttling, CSP, admin, API limits (README "Security") -------------------
# Behind a reverse proxy that terminates TLS: SILL_TRUST_PROXY=1 believes its
# X-Forwarded-Proto and takes the client address from X-Forwarded-For (right-most hop not in
# SILL_TRUSTED_PROXIES, sill/client_address.py). Off, both headers are ignored: any client can
# send them.
SILL_TRUST_PROXY = env_bool("SILL_TRUST_PROXY", default=False)
SILL_TRUSTED_PROXIES = env_list("SILL_TRUSTED_PROXIES", [])
for _network in SILL_TRUSTED_PROXIES:
    try:
        ipaddress.ip_network(_network, strict=False)
    except ValueError as _exc:
        raise ImproperlyConfigured(f"SILL_TRUSTED_PROXIES: {_network!r} is no network") from _exc
if SILL_TRUST_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# django-axes counts failed logins (the product's and the Django admin's) per account *from
# one address*: after SILL_LOGIN_FAILURE_LIMIT failures that pair is locked for
# SILL_LOGIN_COOLOFF_MINUTES (tries while locked are refused, not recorded). The same account
# from another address is not locked, so an attacker hammering the owner's account cannot
# lock the owner out from the owner's own address. One address is also locked outright,
# whatever accounts it tries, after SILL_LOGIN_ADDRESS_FAILURE_LIMIT failures in the cool-down
# window (password spraying): sill/accounts/login_throttle.py.
SILL_LOGIN_FAILURE_LIMIT = env_int("SILL_LOGIN_FAILURE_LIMIT", 5)
SILL_LOGIN_ADDRESS_FAILURE_LIMIT = env_int("SILL_LOGIN_ADDRESS_FAILURE_LIMIT", 30)
SILL_LOGIN_COOLOFF_MINUTES = env_int("SILL_LOGIN_COOLOFF_MINUTES", 15)
if min(SILL_LOGIN_FAILURE_LIMIT, SILL_LOGIN_ADDRESS_FAILURE_LIMIT, SILL_LOGIN_COOLOFF_MINUTES) < 1:
    raise ImproperlyConfigured("SILL_LOGIN_* limits and the cool-down must be at least 1")
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: refuses a locked-out login before any check
    "django.contrib.auth.backends.ModelBackend",
]
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_FAILURE_LIMIT = "sill.accounts.login_throttle.failure_limit"
AXES_COOLOFF_TIME = timedelta(minutes=SILL_LOGIN_COOLOFF_MINUTES)
AXES_RESET_ON_SUCCESS = True
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_USERNAME_CALLABLE = "sill.accounts.login_throttle.username_of"
AXES_CLIENT_IP_CALLABLE = "sill.client_address.client_address"
AXES_LOCKOUT_CALLABLE = "sill.accounts.views.locked_out"
AXES_HTTP_RESPONSE_CODE = 429
AXES_VERBOSE = False

# Content-Security-Policy (django-csp): nothing inline anywhere (templates carry no inline
# script, style or handler: tests/test_templates_have_no_inline_code.py), htmx's indicator
# styles and eval are off (templates/base.html), so no page needs a nonce or 'unsafe-inline'.
# data: images are Pico's form icons. SILL_CSP_REPORT_URI adds a report-uri.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
        "base-uri": ["'none'"],
        "object-src": ["'none'"],
    }
}
SILL_CSP_REPORT_URI = env_str("SILL_CSP_REPORT_URI")
if SILL_CSP_REPORT_URI:
    CONTENT_SECURITY_POLICY["DIRECTIVES"]["report-uri"] = [SILL_CSP_REPORT_URI]
# Browser features no page of Sill's uses, switched off for every page and anything it embeds.
PERMISSIONS_POLICY: dict[str, list[str]] = {
    feature: []
    for feature in (
        "accelerometer", "autoplay", "camera", "display-capture", "encrypted-media",
        "fullscreen", "geolocation", "gyroscope", "magnetometer", "microphone", "midi",
        "payment", "picture-in-picture", "publickey-credentials-get", "screen-wake-lock",
        "serial", "usb", "xr-spatial-tracking",
    )
}  # fmt: skip

# Two-factor authentication. A new site requires it of owners and admins (Site.require_two_factor)
# unless SILL_REQUIRE_TWO_FACTOR=0; the default is on whenever DEBUG is off, and off under
# pytest (TESTING) so the persona fixtures need no device: tests/accounts/test_two_factor*.py
# switch it on per site.
SILL_REQUIRE_TWO_FACTOR = env_bool("SILL_REQUIRE_TWO_FACTOR", default=not (DEBUG or TESTING))
# How recent a code must be for the most sensitive changes (live mode, a rail key, an owner).
SILL_TWO_FACTOR_FRESH_SECONDS = env_int("SILL_TWO_FACTOR_FRESH_SECONDS", 300)
OTP_TOTP_ISSUER = "Sill"
# The Django admin never shows an authenticator's key or QR code, nor recovery codes: whoever
# reads them holds that member's second factor (sill/accounts/admin.py).
OTP_ADMIN_HIDE_SENSITIVE_DATA = True
# The Django admin (sill/admin.py) asks superusers for a code; off only under pytest by default.
SILL_ADMIN_TWO_FACTOR = env_bool("SILL_ADMIN_TWO_FACTOR", default=not TESTING)
# The Django admin (sill/admin.py) is not mounted unless SILL_ADMIN=1; then superusers only.
SILL_ADMIN = env_bool("SILL_ADMIN", default=False)
# The OpenAPI schema (/api/schema/) needs a login unless DEBUG or SILL_PUBLIC_SCHEMA=1.
SILL_PUBLIC_SCHEMA = env_bool("SILL_PUBLIC_SCHEMA", default=False)

# API rate limits (DRF throttles on the default cache: Redis with REDIS_URL; without it each
# process counts alone), "<requests>/<second|minute|hour|day>", sill/api.py. Each credential
# has its own budget: an agent's signing key (counted once its signature verified) and its
# bearer token, a member's API token and a member's session; requests with no credential
# (mandate posts before their signature is checked) share their address's budget, which must
# leave room for every agent an agent platform runs behind one address. "off" switches one
# limit off. The tests switch them off except where they test them.
_RATE_DEFAULTS = {
    "address": "600/minute",
    "mandate_key": "120/minute",
    "agent_token": "600/minute",
    "member_token": "300/minute",
    "member_session": "600/minute",
    # PayPal webhooks PayPal is asked to verify, per site (sill.rails.paypal.webhooks), and
    # each client address's share of that budget (what PayPal verified is given back to the
    # share): one address's junk cannot use up the site's.
    "paypal_verify": "120/minute",
    "paypal_verify_address": "30/minute",
}
SILL_API_RATES: dict[str, str | None] = {}
for _scope, _default in _RATE_DEFAULTS.items():
    _rate = env_str(f"SILL_RATE_{_scope.upper()}", None if TESTING else _default)
    if (
        _rate is not None
        and _rate != "off"
        and not re.fullmatch(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)", _rate)
    ):
        raise ImproperlyConfigured(
            f"SILL_RATE_{_scope.upper()} must look like 120/minute or be off, got {_rate!r}"
        )
    SILL_API_RATES[_scope] = None if _rate in (None, "off") else _rate

# The largest JSON body the DRF API reads (sill.api.StrictJSONParser); a larger one is
# 413 too_large before it is read. The member APIs' bodies are small: a staff refund is a few
# fields and a note of at most 1000 characters (12 KB even written as \u escapes), a rule a
# handful of conditions, a template its id and a few parameters; 64 KiB leaves room to spare
# and is the mandate API's own limit (refunds.agent.mandates.MAX_BODY_BYTES). Django's
# DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB, left at its default) bounds request.body and forms
# only, and is 40 times more memory than any API body needs.
SILL_API_MAX_BODY_BYTES = env_int("SILL_API_MAX_BODY_BYTES", 64 * 1024)
if SILL_API_MAX_BODY_BYTES < 1024:
    raise ImproperlyConfigured("SILL_API_MAX_BODY_BYTES is at least 1024")

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = SILL_DATA_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG or TESTING
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        )
    },
}

EMAIL_BACKEND = env_str(
    "SILL_EMAIL_BACKEND",
    "django.core.mail.backends.console.EmailBackend"
    if DEBUG
    else "django.core.mail.backends.smtp.EmailBackend",
)
DEFAULT_FROM_EMAIL = env_str("SILL_FROM_EMAIL", "Sill <refunds@sill.example>")
EMAIL_HOST = env_str("SILL_EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("SILL_EMAIL_PORT", 25)
# How long a send waits on the SMTP server (each connect, read and write), in seconds: Django's
# default waits forever, and an invitation is sent inside its transaction (sill/accounts/
# invites.py), the e-mail tasks hold a worker while they wait.
EMAIL_TIMEOUT = env_int("SILL_EMAIL_TIMEOUT_SECONDS", 10)
if EMAIL_TIMEOUT < 1:
    raise ImproperlyConfigured("SILL_EMAIL_TIMEOUT_SECONDS must be at least 1")

REST_FRAMEWORK = {
    # drf-spectacular's, with the refusals every API view may answer (sill/api_schema.py).
    "DEFAULT_SCHEMA_CLASS": "sill.api_schema.ApiSchema",
    "EXCEPTION_HANDLER": "sill.api.exception_handler",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # Strict JSON everywhere (sill/jsonbody.py): depth, duplicate keys, constants, NUL.
    "DEFAULT_PARSER_CLASSES": ["sill.api.StrictJSONParser"],
    # ?format= that no renderer writes: 406 not_acceptable, not DRF's 404 (sill/negotiation.py).
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "sill.negotiation.StrictContentNegotiation",
    "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.SessionAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # Rates: SILL_API_RATES (above). Each class counts one kind of credential.
    "DEFAULT_THROTTLE_CLASSES": [
        "sill.api.AddressThrottle",
        "sill.api.AgentTokenThrottle",
        "sill.api.MemberTokenThrottle",
        "sill.api.MemberSessionThrottle",
    ],
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Sill API",
    "DESCRIPTION": "Signed refund mandates for AI agents, and staff refunds.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
}

_LOG_LEVEL = env_log_level("SILL_LOG_LEVEL", "INFO")
# HTTP clients that write secrets at DEBUG: slack_sdk each URL it posts to (a merchant's
# incoming webhook, a click's response_url: whoever holds one can post into the merchant's
# Slack), urllib3 each request line with its query (a token in SILL_AUDIT_CHECKPOINT_URL's, the
# consumer key a WooCommerce store reached over plain HTTP is signed with), stripe each response
# body (a PaymentIntent's client_secret). They log at INFO or above whatever SILL_LOG_LEVEL says
# (at the root's level when it is higher).
_SECRET_WRITING_LOGGERS = ("slack_sdk", "urllib3", "stripe")
_SECRET_WRITING_LEVEL = logging.getLevelName(
    max(logging.INFO, logging.getLevelNamesMapping().get(str(_LOG_LEVEL), logging.INFO))
)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "filters": {"path_tokens": {"()": "sill.log_redaction.RedactPathTokens"}},
    "root": {"handlers": ["console"], "level": _LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        **{name: {"level": _SECRET_WRITING_LEVEL} for name in _SECRET_WRITING_LOGGERS},
        # Both write the path of each refused or failed request, and an invitation's link and a
        # password reset link are paths holding their tokens (sill/log_redaction.py).
        "django.request": {"filters": ["path_tokens"]},
        "django.security.csrf": {"filters": ["path_tokens"]},
    },
}
