"""Rail tests: localstripe for Stripe (see tests/localstripe.py)."""

from tests.localstripe import localstripe_url  # noqa: F401
