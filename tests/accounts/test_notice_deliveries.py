"""Each member hears of a notice once (``sill.accounts.notices.email_members``): a row per
member told is claimed before their message goes to the server, so a second try of the
notice, or a second sender racing the first, skips them; the rows are kept
``DELIVERIES_KEPT`` and then deleted by the notices that send."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.core import mail
from django.core.mail.backends.locmem import EmailBackend as LocmemBackend
from django.utils import timezone

from sill.accounts.models import NoticeDelivery, Role
from sill.accounts.notices import DELIVERIES_KEPT, Delivery, email_members
from tests.failing_mail import REFUSING_SOME, THREE_DECIDERS, add_second_admin, messages_to
from tests.threads import run_concurrently

OWNER, ADMIN = "owner@roasters.example", "admin@roasters.example"
NOTICE = "refund-attention:01TESTREFUND00000000000001"


def tell(site, notice: str = NOTICE) -> Delivery:
    return email_members(
        site_id=site.pk,
        notice=notice,
        subject="[Sill] Needs attention",
        lines_for={Role.OWNER: ["Record it."], Role.ADMIN: ["Ask an owner."]},
    )


@pytest.mark.django_db
def test_a_second_try_of_a_notice_sends_nothing_and_counts_as_told(site, members):
    assert tell(site).sent_to == (ADMIN, OWNER)

    again = tell(site)

    assert again.sent_to == () and again.told_before == 2 and again.told
    assert messages_to() == {ADMIN: 1, OWNER: 1}
    assert tell(site, "refund-attention:another").sent_to == (ADMIN, OWNER)  # its own notice
    rows = NoticeDelivery.objects.filter(site=site, notice=NOTICE)
    assert sorted(rows.values_list("user__username", flat=True)) == [ADMIN, OWNER]


@pytest.mark.django_db
def test_a_member_refused_for_good_after_the_others_were_told_does_not_reopen_it(
    site, members, settings
):
    """Told before, the others count: the server refusing the last member's message is
    logged by the caller as a refusal of one recipient, not a refusal of the notice."""
    NoticeDelivery.objects.create(
        site=site, notice=NOTICE, user=members["owner"].user, claimed_at=timezone.now()
    )
    settings.EMAIL_BACKEND = REFUSING_SOME
    settings.MAIL_REFUSED_ADDRESSES = [ADMIN]

    delivery = tell(site)

    assert delivery == Delivery(sent_to=(), refused="SMTPRecipientsRefused", told_before=1)
    assert delivery.told and mail.outbox == []
    assert not NoticeDelivery.objects.filter(user=members["admin"].user).exists()


@pytest.mark.django_db
def test_a_member_another_sender_claimed_is_left_to_it(site, members):
    NoticeDelivery.objects.create(
        site=site, notice=NOTICE, user=members["admin"].user, claimed_at=timezone.now()
    )

    delivery = tell(site)

    assert delivery.sent_to == (OWNER,) and delivery.told_before == 1
    assert messages_to() == {OWNER: 1}


@pytest.mark.django_db
def test_the_rows_of_another_site_are_not_its_own(site, other_site, members):
    """Scoped by site: a row of another site's notice of the same name tells nobody here."""
    NoticeDelivery.objects.create(
        site=other_site, notice=NOTICE, user=members["owner"].user, claimed_at=timezone.now()
    )

    assert tell(site).sent_to == (ADMIN, OWNER)


@pytest.mark.django_db
def test_rows_older_than_they_are_kept_are_deleted_by_the_next_notice_sent(site, members):
    now = timezone.now()
    owner = members["owner"].user
    old = NoticeDelivery.objects.create(
        site=site, notice="held-refund:old", user=owner, claimed_at=now - DELIVERIES_KEPT
    )
    kept = NoticeDelivery.objects.create(
        site=site,
        notice="held-refund:recent",
        user=owner,
        claimed_at=now - DELIVERIES_KEPT + timedelta(minutes=5),
    )

    tell(site)

    assert not NoticeDelivery.objects.filter(pk=old.pk).exists()
    assert NoticeDelivery.objects.filter(pk=kept.pk).exists()
    assert NoticeDelivery.objects.filter(notice=NOTICE).count() == 2


class SlowBackend(LocmemBackend):
    """A server that takes a while over each message: two senders overlap."""

    def send_messages(self, messages):
        time.sleep(0.2)
        return super().send_messages(messages)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_senders_racing_on_one_notice_tell_each_member_once(site, members, settings):
    """The caller's claim of the notice serialises its senders; this is the backstop for one
    that has none (or lost it): the unique row per member, taken before the message is sent."""
    add_second_admin(site)
    settings.EMAIL_BACKEND = "tests.accounts.test_notice_deliveries.SlowBackend"

    results = run_concurrently(2, lambda _: tell(site))

    assert all(isinstance(r, Delivery) for r in results), results
    assert messages_to() == dict.fromkeys(THREE_DECIDERS, 1)
    assert sorted(len(r.sent_to) + r.told_before for r in results) == [3, 3]
