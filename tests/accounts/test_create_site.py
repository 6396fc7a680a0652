"""A new site starts with the default refund reasons, seeded in the transaction that made it."""

from __future__ import annotations

import pytest
from django.db import transaction

from audit.models import AuditRecord
from refunds.models import RefundReason
from refunds.reasons.services import DEFAULT_CODES
from sill.accounts.models import Site
from sill.accounts.services import create_site

pytestmark = pytest.mark.django_db


def test_it_seeds_the_default_reasons_when_a_site_is_created():
    site = create_site(name="New Shop", merchant_domain="new.example")
    codes = set(RefundReason.objects.filter(site=site).values_list("code", flat=True))
    assert set(DEFAULT_CODES) <= codes
    assert AuditRecord.objects.filter(site=site, kind="reason_change").exists()


def test_a_site_whose_seeding_fails_is_not_created():
    class Boom(Exception):
        pass

    from sill.accounts.signals import site_created

    def fail(sender, **kwargs):
        raise Boom

    site_created.connect(fail, dispatch_uid="test-fail")
    try:
        with pytest.raises(Boom), transaction.atomic():
            create_site(name="Broken", merchant_domain="broken.example")
    finally:
        site_created.disconnect(dispatch_uid="test-fail")
    assert not Site.objects.filter(merchant_domain="broken.example").exists()


def test_the_order_and_reasons_pages_write_nothing_on_get(client_for, site, make_order):
    order = make_order()
    before = (AuditRecord.objects.count(), RefundReason.objects.count())
    client_for("owner").get(f"/orders/{order.id}/")
    client_for("owner").get("/settings/reasons/")
    assert (AuditRecord.objects.count(), RefundReason.objects.count()) == before
