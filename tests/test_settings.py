"""Production settings: loud failures, and a clean `check --deploy`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    skip = ("SILL_", "DEBUG", "DJANGO_ALLOW_ASYNC_UNSAFE")
    base = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
    base.update({"SILL_DATA_DIR": str(tmp_path), **env})
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=base,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_it_passes_check_deploy_with_the_documented_variables(tmp_path):
    result = _run(
        tmp_path,
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        SILL_SECRET_KEY="k" * 20 + "-a-long-random-production-secret-0123456789",
        SILL_ALLOWED_HOSTS="refunds.example.com",
        SILL_AUDIT_SIGNING_KEY="AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_it_refuses_to_start_without_a_secret_key_when_debug_is_off(tmp_path):
    result = _run(tmp_path, "check")
    assert result.returncode != 0
    assert "SILL_SECRET_KEY must be set" in result.stderr


def test_it_refuses_a_base_url_that_is_not_an_absolute_address(tmp_path):
    # Every emailed link (invitations, password resets, held refunds) and the webhook
    # addresses merchants paste into their rails are built from it: "refunds.example.com"
    # without its scheme made every one of them a link that opens nothing, and nothing said so.
    for wrong in ("refunds.example.com", "https://", "ftp://refunds.example.com"):
        result = _run(tmp_path, "check", **_PRODUCTION, SILL_BASE_URL=wrong)
        assert result.returncode != 0, wrong
        assert "SILL_BASE_URL must be an absolute http(s) address" in result.stderr, wrong
    assert (
        _run(tmp_path, "check", **_PRODUCTION, SILL_BASE_URL="https://r.example/").returncode == 0
    )


def test_it_refuses_a_malformed_boolean(tmp_path):
    result = _run(tmp_path, "check", DEBUG="maybe")
    assert result.returncode != 0
    assert "DEBUG must be a boolean" in result.stderr


# Runs in a child process: the names of the environment variables read while Django starts
# (settings, then every app), one per line.
_VARIABLES_READ = """
import os
import re
read = set()
get = os._Environ.__getitem__
def recording(self, key):
    read.add(key)
    return get(self, key)
os._Environ.__getitem__ = recording
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sill.settings")
import django
django.setup()
print("\\n".join(sorted(read)))
"""

# Switches of the test suite, not of a deployment (README "The two commands").
_TEST_ONLY = {"SILL_TESTING", "SILL_CELERY_EAGER"}

_PRODUCTION = {
    "SILL_SECRET_KEY": "k" * 20 + "-a-long-random-production-secret-0123456789",
    "SILL_ALLOWED_HOSTS": "refunds.example.com",
}


def _python(tmp_path: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    # Without the services too: some variables are read only without them (the embedded
    # broker's folder without REDIS_URL), and every one should be seen.
    skip = ("SILL_", "DEBUG", "DJANGO_ALLOW_ASYNC_UNSAFE", "DATABASE_URL", "REDIS_URL")
    base = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
    base.update({"SILL_DATA_DIR": str(tmp_path), "PYTHONPATH": str(ROOT), **env})
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=base, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


def _variables_read(tmp_path: Path) -> set[str]:
    result = _python(tmp_path, _VARIABLES_READ, **_PRODUCTION)
    assert result.returncode == 0, result.stderr
    return set(result.stdout.split())


def _documented() -> set[str]:
    """The variables README's "Configuration" table names in its first column, and every
    ``SILL_…`` name README and docs/ write as code anywhere else (the Security section's,
    say)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            names.update(re.findall(r"`([A-Z][A-Z0-9_]+)`", line.split("|")[1]))
    for page in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        names.update(re.findall(r"`(SILL_[A-Z0-9_]+)`", page.read_text()))
    return names


def test_every_variable_the_documentation_names_is_read_from_the_environment(tmp_path):
    documented = _documented()
    assert {"SILL_SECRET_KEY", "SILL_WEBHOOK_MAX_ATTEMPTS", "DATABASE_URL"} <= documented
    # Before: the webhook retry bounds, the stores' timeouts and how fresh a two-factor code
    # must be were documented but only ever read from Django's settings, where nothing set
    # them from the environment: the variables did nothing.
    assert sorted(documented - _variables_read(tmp_path)) == []


def test_every_variable_sill_reads_is_documented(tmp_path):
    read = {name for name in _variables_read(tmp_path) if name.startswith("SILL_")}
    readme = (ROOT / "README.md").read_text()
    assert sorted(name for name in read - _TEST_ONLY if f"`{name}`" not in readme) == []


def test_the_retry_bounds_and_timeouts_are_taken_from_the_environment(tmp_path):
    result = _python(
        tmp_path,
        "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'sill.settings');"
        " django.setup()\n"
        "from django.conf import settings\n"
        "from sill.orders import charge_lease, charging\n"
        "from sill.rails import event_attempts as e\n"
        "print(e.max_attempts(), e.retry_after().seconds, e.transient_grace().seconds,"
        " charging.max_attempts(), charging.attention_recheck().seconds,"
        " charge_lease.lease_seconds(), settings.SILL_SHOPIFY_TIMEOUT_SECONDS,"
        " settings.SILL_PAYPAL_TIMEOUT_SECONDS, settings.SILL_WOOCOMMERCE_TIMEOUT_SECONDS,"
        " settings.SILL_TWO_FACTOR_FRESH_SECONDS)",
        **_PRODUCTION,
        SILL_WEBHOOK_MAX_ATTEMPTS="9",
        SILL_WEBHOOK_RETRY_AFTER_SECONDS="42",
        SILL_WEBHOOK_TRANSIENT_GRACE_SECONDS="600",
        SILL_CHARGE_MAX_ATTEMPTS="3",
        SILL_CHARGE_ATTENTION_RECHECK_SECONDS="120",
        SILL_EXECUTION_LEASE_SECONDS="90",
        SILL_SHOPIFY_TIMEOUT_SECONDS="7.5",
        SILL_PAYPAL_TIMEOUT_SECONDS="8",
        SILL_WOOCOMMERCE_TIMEOUT_SECONDS="9",
        SILL_TWO_FACTOR_FRESH_SECONDS="120",
    )
    assert result.returncode == 0, result.stderr
    # The charge's lease follows the execution's unless set.
    assert result.stdout.split() == ["9", "42", "600", "3", "120", "90", "7.5", "8.0", "9.0", "120"]


def test_it_refuses_a_malformed_retry_bound(tmp_path):
    result = _run(tmp_path, "check", DEBUG="1", SILL_WEBHOOK_MAX_ATTEMPTS="five")
    assert result.returncode != 0
    assert "SILL_WEBHOOK_MAX_ATTEMPTS must be an integer" in result.stderr


def test_it_refuses_a_key_switch_shorter_than_processes_take_to_see_the_key(tmp_path):
    """Every process reloads the rotated audit keys every 15 s: a rotated key that started
    signing sooner would meet processes still signing with the old key past its window, and
    the honest log would fail verification."""
    from audit.keys import RELOAD_SECONDS

    assert 2 * RELOAD_SECONDS <= 30  # the minimum follows the reload interval
    result = _run(tmp_path, "check", DEBUG="1", SILL_AUDIT_KEY_SWITCH_SECONDS="5")
    assert result.returncode != 0
    assert "SILL_AUDIT_KEY_SWITCH_SECONDS must be at least 30" in result.stderr
    assert _run(tmp_path, "check", DEBUG="1", SILL_AUDIT_KEY_SWITCH_SECONDS="30").returncode == 0


def test_it_refuses_a_malformed_audit_signing_key_at_start_up(tmp_path):
    """README "Configuration": a value that cannot be read stops start-up. A bad
    SILL_AUDIT_SIGNING_KEY used to pass `check` and start the server, then fail every audit
    append (every decision) on first use."""
    for bad in ["abc", "A" * 42, "A" * 44]:
        result = _run(tmp_path, "check", DEBUG="1", SILL_AUDIT_SIGNING_KEY=bad)
        assert result.returncode != 0, bad
        assert "SILL_AUDIT_SIGNING_KEY must be a base64url-encoded 32-byte" in result.stderr
    good = _run(tmp_path, "check", DEBUG="1", SILL_AUDIT_SIGNING_KEY="A" * 43)
    assert good.returncode == 0, good.stderr


def test_it_refuses_an_audit_origin_no_checkpoint_can_be_signed_under(tmp_path):
    """The origin names each site's log and is its checkpoints' key name, which
    c2sp.org/signed-note forbids to hold spaces or '+': such a value used to start Sill, then
    fail every checkpoint run."""
    for bad in ["sill example/audit", "sill.example/audit+1", "sill.example/\taudit"]:
        result = _run(tmp_path, "check", DEBUG="1", SILL_AUDIT_ORIGIN=bad)
        assert result.returncode != 0, bad
        assert "SILL_AUDIT_ORIGIN" in result.stderr, result.stderr
    good = _run(tmp_path, "check", DEBUG="1", SILL_AUDIT_ORIGIN="refunds.example.com/audit")
    assert good.returncode == 0, good.stderr


def test_the_cache_and_the_broker_give_up_on_a_redis_that_does_not_answer(tmp_path):
    # Without timeouts a Redis host that drops packets held each request (a rate limit's
    # counter, an on-commit publish) until the kernel gave up on the connection.
    result = _python(
        tmp_path,
        "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'sill.settings');"
        " django.setup()\n"
        "from django.conf import settings\n"
        "o, b = settings.CACHES['default']['OPTIONS'], settings.CELERY_BROKER_TRANSPORT_OPTIONS\n"
        "print(o['socket_connect_timeout'], o['socket_timeout'],"
        " b['socket_connect_timeout'], b['socket_timeout'])",
        **_PRODUCTION,
        REDIS_URL="redis://127.0.0.1:6379/0",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2.0", "2.0", "2.0", "5.0"]


def test_postgresql_sessions_get_a_lock_and_an_idle_limit_except_in_the_tests(tmp_path):
    # In production a session idle inside a transaction for a minute is ended (its locks
    # released); pytest-django's per-test transaction idles while a test waits, so the tests
    # run without it unless they set it.
    show = (
        "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'sill.settings');"
        " django.setup()\n"
        "from django.conf import settings\n"
        "print(settings.SILL_DB_LOCK_TIMEOUT_SECONDS, settings.SILL_DB_IDLE_IN_TRANSACTION_SECONDS)"
    )
    production = _python(tmp_path, show, **_PRODUCTION)
    testing = _python(tmp_path, show, **_PRODUCTION, SILL_TESTING="1")
    assert production.returncode == 0 and testing.returncode == 0, production.stderr
    assert production.stdout.split() == ["10", "60"]
    assert testing.stdout.split() == ["10", "0"]


# Runs in a child process: the levels of the root logger and of the loggers that write secrets.
_SHOW_LOG_LEVELS = (
    "import django, logging, os;"
    " os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'sill.settings'); django.setup()\n"
    "names = ('', 'slack_sdk.webhook.client', 'slack_sdk.web.base_client',"
    " 'urllib3.connectionpool', 'stripe')\n"
    "print(*(logging.getLevelName(logging.getLogger(n).getEffectiveLevel()) for n in names))"
)


def test_the_loggers_that_write_secrets_stay_at_info_whatever_the_log_level(tmp_path):
    # At DEBUG, slack_sdk writes the Slack URLs it posts to (capabilities), urllib3 each
    # request's query, stripe each response body with its client_secret: SILL_LOG_LEVEL=DEBUG
    # for an on-call look must not put them in the log. A higher level still quiets them.
    debug = _python(tmp_path, _SHOW_LOG_LEVELS, **_PRODUCTION, SILL_LOG_LEVEL="DEBUG")
    warning = _python(tmp_path, _SHOW_LOG_LEVELS, **_PRODUCTION, SILL_LOG_LEVEL="WARNING")
    assert debug.returncode == 0 and warning.returncode == 0, debug.stderr + warning.stderr
    assert debug.stdout.split() == ["DEBUG", "INFO", "INFO", "INFO", "INFO"]
    assert warning.stdout.split() == ["WARNING"] * 5


def test_the_log_level_is_read_in_any_case_and_a_wrong_one_is_refused_by_name(tmp_path):
    # SILL_LOG_LEVEL=debug, typed during an incident, stopped every process from starting
    # ("ValueError: Unable to configure root logger", naming no variable).
    lower = _python(tmp_path, _SHOW_LOG_LEVELS, **_PRODUCTION, SILL_LOG_LEVEL=" debug")
    assert lower.returncode == 0, lower.stderr
    assert lower.stdout.split() == ["DEBUG", "INFO", "INFO", "INFO", "INFO"]
    wrong = _python(tmp_path, _SHOW_LOG_LEVELS, **_PRODUCTION, SILL_LOG_LEVEL="LOUD")
    assert wrong.returncode != 0
    assert "SILL_LOG_LEVEL must be a log level" in wrong.stderr and "'LOUD'" in wrong.stderr
