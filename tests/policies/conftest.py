"""Policy fixtures: the agent API (signed mandates, tasks run on commit) and rule helpers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from policies import catalog
from policies.services import apply_catalog_item, set_auto_refund
from sill.accounts import two_factor
from sill.accounts.models import Membership, Site
from sill.money import Money
from tests.conftest import site_owner
from tests.e2e.conftest import (  # noqa: F401  (browser fixtures, as in tests/e2e)
    CHROMIUM,
    browser_type_launch_args,
    screenshot_dir,
)
from tests.refunds.conftest import (  # noqa: F401  (fixtures, re-exported for these tests)
    agent_key,
    mock_rail,
    post,
    sign,
    signing_key,
)


@pytest.fixture
def owner(members: dict[str, Membership]) -> Any:
    return members["owner"].user


@pytest.fixture
def agent_api(django_capture_on_commit_callbacks) -> Callable[[bytes], Any]:
    """Send a signed mandate body; on-commit tasks (execution) run before it returns."""
    client = Client()

    def send(body: bytes) -> Any:
        with django_capture_on_commit_callbacks(execute=True):
            return post(client, body)

    return send


@pytest.fixture
def apply_template(site: Site, owner: Any) -> Callable[..., Any]:
    def apply(item_id: str, *, on_site: Site | None = None, **kwargs: Any) -> Any:
        item = catalog.item_by_id(item_id)
        assert item is not None
        # On another site, as that site's owner: the service checks who acts.
        actor = owner if on_site is None else site_owner(on_site)
        return apply_catalog_item(site=on_site or site, actor=actor, item=item, **kwargs)

    return apply


@pytest.fixture
def auto_refund(site: Site, owner: Any) -> Callable[..., str]:
    def switch(cap: str, *, enabled: bool = True, currency: str = "USD") -> str:
        from sill.money import parse_major

        cap_money: Money = parse_major(cap, currency)
        return set_auto_refund(
            site=site,
            actor=owner,
            enabled=enabled,
            cap=cap_money,
            second_factor=two_factor.OPERATOR,
        )

    return switch


def pytest_collection_modifyitems(config, items):
    # As in tests/e2e: browser tests are skipped where Debian's Chromium is missing.
    if CHROMIUM:
        return
    skip = pytest.mark.skip(reason="Debian's chromium is not installed (apt-get install chromium)")
    for item in items:
        if item.get_closest_marker("e2e"):
            item.add_marker(skip)
