"""Rail tests: localstripe for Stripe (see tests/localstripe.py), and signed agent mandates."""

from tests.localstripe import localstripe_url  # noqa: F401
from tests.rails.localstripe_fixtures import api, deliver, paid, sdk  # noqa: F401
from tests.rails.paypal_fixtures import paypal, paypal_account, paypal_order  # noqa: F401
from tests.rails.shopify_fixtures import shopify, shopify_account  # noqa: F401
from tests.rails.woo_fixtures import woo, woo_account  # noqa: F401
from tests.refunds.conftest import agent_key, sign, signing_key  # noqa: F401
