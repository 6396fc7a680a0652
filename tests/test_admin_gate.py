"""The Django admin: not there unless SILL_ADMIN=1, then superusers only; its rail form holds
credentials to the rails page's checks."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from audit.activity import rows_for
from audit.models import AuditRecord
from audit.selectors import chain_verification
from sill.rails.models import RailAccount
from tests.admin_mount import admin_mounted
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

ADD_RAIL = "/django-admin/rails/railaccount/add/"


@pytest.fixture
def mounted():
    with admin_mounted():
        yield


def _user(email: str, *, staff: bool = False, superuser: bool = False):
    return get_user_model().objects.create_user(
        email, email=email, password=PASSWORD, is_staff=staff or superuser, is_superuser=superuser
    )


@pytest.fixture
def root() -> Client:
    client = Client()
    client.force_login(_user("root@sill.example", superuser=True))
    return client


@pytest.mark.parametrize("path", ["/django-admin/", "/django-admin/login/", ADD_RAIL])
def test_it_is_not_mounted_by_default(db, path):
    superuser = Client()
    superuser.force_login(_user("root@sill.example", superuser=True))
    assert superuser.get(path).status_code == 404
    assert Client().get(path).status_code == 404


def test_it_lets_a_superuser_in(mounted):
    _user("root@sill.example", superuser=True)
    client = Client()
    login = {"username": "root@sill.example", "password": PASSWORD, "next": "/django-admin/"}
    assert client.post("/django-admin/login/", login).status_code == 302
    page = client.get("/django-admin/")
    assert page.status_code == 200 and "Sill administration" in page.content.decode()


def test_it_refuses_staff_without_superuser_at_the_login(mounted):
    _user("staffer@sill.example", staff=True)
    client = Client()
    response = client.post(
        "/django-admin/login/", {"username": "staffer@sill.example", "password": PASSWORD}
    )
    assert response.status_code == 200
    assert "Please enter the correct" in response.content.decode()
    assert "_auth_user_id" not in client.session


@pytest.mark.parametrize("persona", ["staff_user", "owner", "anonymous"])
def test_it_refuses_everyone_but_superusers_on_every_page(mounted, members, persona):
    client = Client()
    if persona == "staff_user":
        client.force_login(_user("staffer@sill.example", staff=True))
    elif persona == "owner":
        client.force_login(members["owner"].user)
    for path in ("/django-admin/", ADD_RAIL, "/django-admin/rails/railaccount/"):
        response = client.get(path)
        assert response.status_code == 302 and "/django-admin/login/" in response["Location"]


def _rail_form(site, **fields: str) -> dict[str, str]:
    form = {
        "site": site.pk,
        "rail": "stripe",
        "mode": "test",
        "connected_account": "",
        "api_base": "",
        "config": "{}",
        "new_secret": "",
    }
    form.update(fields)
    return form


def _errors(response) -> str:
    assert response.status_code == 200, "the form was accepted"
    return response.content.decode()


def test_the_rail_form_refuses_an_api_base_with_debug_off(mounted, root, site):
    response = root.post(ADD_RAIL, _rail_form(site, api_base="http://169.254.169.254/latest"))
    assert "can only be overridden when DEBUG is on" in _errors(response)
    assert not RailAccount.objects.exists()


def test_the_rail_form_takes_an_api_base_with_debug_on_like_the_rails_page(
    mounted, root, site, settings
):
    settings.DEBUG = True
    form = _rail_form(site, api_base="http://127.0.0.1:8420/", new_secret="sk_test_" + "a" * 24)
    assert root.post(ADD_RAIL, form).status_code == 302
    account = RailAccount.objects.get(site=site, rail="stripe")
    assert account.api_base == "http://127.0.0.1:8420"  # as the page stores it
    assert account.get_secret() == "sk_test_" + "a" * 24


def test_the_rail_form_leaves_a_stored_api_base_alone_with_debug_off(mounted, root, site):
    account = RailAccount.objects.create(site=site, rail="stripe", api_base="http://127.0.0.1:8420")
    account.set_secret("sk_test_" + "b" * 24)
    account.save()
    change = f"/django-admin/rails/railaccount/{account.pk}/change/"
    form = _rail_form(site, api_base="http://127.0.0.1:8420", enabled="on")
    assert root.post(change, form).status_code == 302
    account.refresh_from_db()
    assert account.enabled and account.api_base == "http://127.0.0.1:8420"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"new_secret": "pk_test_" + "a" * 24}, "That is not a Stripe secret key"),
        ({"new_secret": "sk_test_bad key!"}, "unexpected characters"),
        ({"new_secret": "sk_live_" + "a" * 24, "mode": "live"}, "Live mode is switched off"),
        ({"new_secret": "sk_live_" + "a" * 24}, "The key is a live key"),
        ({"connected_account": "acct with spaces"}, "A connected account id looks like"),
        ({"enabled": "on"}, "Save a Stripe secret key before switching"),
        ({"rail": "shopify", "new_secret": "shpat_" + "a" * 32}, "Connect this rail on Settings"),
        ({"rail": "shopify", "enabled": "on"}, "Connect this rail on Settings → Rails with"),
        ({"rail": "paypal", "enabled": "on"}, "Connect this rail on Settings → Rails with"),
        ({"rail": "paypal", "new_secret": "client:secret"}, "Connect this rail on Settings"),
    ],
)
def test_the_rail_form_holds_credentials_to_the_rails_page_checks(
    mounted, root, site, fields, message
):
    assert message in _errors(root.post(ADD_RAIL, _rail_form(site, **fields)))
    assert not RailAccount.objects.exists()


def test_the_rail_form_takes_a_live_key_where_live_is_allowed(mounted, root, site, settings):
    settings.SILL_ALLOW_LIVE = True
    form = _rail_form(site, new_secret="sk_live_" + "c" * 24, mode="live", enabled="on")
    assert root.post(ADD_RAIL, form).status_code == 302
    assert RailAccount.objects.get(site=site, rail="stripe").mode == "live"


# --- every change here is signed like the rails page's ---------------------------------------
# Before: the admin saved rail accounts with ModelForm.save alone. A superuser could switch a
# rail on or off, move Stripe to live or replace its key, and the Activity page showed nothing.


def _rail_changes(site) -> list[dict]:
    records = AuditRecord.objects.filter(site=site, kind="rail_change").order_by("seq")
    return [json.loads(r.payload) for r in records]


def test_a_rail_saved_in_the_admin_is_signed_without_its_key(mounted, root, site):
    key = "sk_test_" + "d" * 24
    assert root.post(ADD_RAIL, _rail_form(site, new_secret=key, enabled="on")).status_code == 302
    [record] = _rail_changes(site)
    body = record["body"]
    assert body["action"] == "connect" and body["via"] == "django_admin"
    assert body["rail"] == "stripe" and body["enabled"] is True and body["new_key"] is True
    assert body["actor"] == "root@sill.example"
    assert "new_key" in body["changed"]
    assert key not in json.dumps(record)
    assert chain_verification(site).ok
    [row] = rows_for(site, AuditRecord.objects.filter(site=site, kind="rail_change"))
    assert row.summary.startswith("Stripe connected in the Django admin")


def test_switching_a_rail_off_in_the_admin_is_signed_and_an_unchanged_save_is_not(
    mounted, root, site
):
    account = RailAccount.objects.create(site=site, rail="stripe", enabled=True)
    account.set_secret("sk_test_" + "e" * 24)
    account.save()
    change = f"/django-admin/rails/railaccount/{account.pk}/change/"
    form = _rail_form(site, config=json.dumps(account.config))  # as the page shows it
    assert root.post(change, form).status_code == 302  # "enabled" unticked
    assert root.post(change, form).status_code == 302  # the same again
    [record] = _rail_changes(site)
    assert record["body"]["action"] == "update" and record["body"]["changed"] == ["enabled"]
    assert record["body"]["enabled"] is False and record["body"]["new_key"] is False
    assert not RailAccount.objects.get(pk=account.pk).enabled


def test_deleting_a_rail_in_the_admin_is_signed(mounted, root, site):
    account = RailAccount.objects.create(site=site, rail="mock", enabled=True)
    delete = f"/django-admin/rails/railaccount/{account.pk}/delete/"
    assert root.post(delete, {"post": "yes"}).status_code == 302
    [record] = _rail_changes(site)
    assert record["body"]["action"] == "delete" and record["body"]["rail"] == "mock"
    assert not RailAccount.objects.filter(pk=account.pk).exists()


def test_deleting_rails_in_bulk_in_the_admin_signs_each(mounted, root, site):
    accounts = [RailAccount.objects.create(site=site, rail=r) for r in ("mock", "paypal")]
    response = root.post(
        "/django-admin/rails/railaccount/",
        {"action": "delete_selected", "_selected_action": [a.pk for a in accounts], "post": "yes"},
    )
    assert response.status_code == 302
    assert sorted(r["body"]["rail"] for r in _rail_changes(site)) == ["mock", "paypal"]
    assert not RailAccount.objects.exists()


def test_woocommerce_is_not_switched_on_in_the_admin_without_stripe(mounted, root, site):
    """As on the rails page: a store's payments are Stripe charges, refunded on Stripe."""
    woo = RailAccount.objects.create(
        site=site, rail="woocommerce", enabled=False, connected_account="https://s"
    )
    woo.set_secret("ck_1:cs_1")
    woo.save()
    change = f"/django-admin/rails/railaccount/{woo.pk}/change/"
    form = _rail_form(site, rail="woocommerce", connected_account="https://s", enabled="on")
    assert "Connect Stripe first" in _errors(root.post(change, form))
    assert not RailAccount.objects.get(pk=woo.pk).enabled
    assert _rail_changes(site) == []


def test_another_woocommerce_store_is_not_connected_in_the_admin_on_the_first_ones_secret(
    mounted, root, site
):
    """As on the rails page: another store needs a webhook secret of its own, and this form
    takes none. Seen: the admin changed the store's address and kept store A's webhook secret,
    which went on verifying whatever A signed, filed as the new store's orders."""
    woo = RailAccount.objects.create(
        site=site, rail="woocommerce", enabled=False, connected_account="https://a.example"
    )
    woo.set_secret("ck_1:cs_1")
    woo.set_webhook_secrets(["store-a-webhook-secret"])
    woo.save()
    change = f"/django-admin/rails/railaccount/{woo.pk}/change/"
    form = _rail_form(site, rail="woocommerce", connected_account="https://b.example")
    page = _errors(root.post(change, form))
    assert "Enter the webhook secret of https://b.example" in page
    assert "Connect another store on Settings → Rails" in page
    saved = RailAccount.objects.get(pk=woo.pk)
    assert saved.connected_account == "https://a.example"
    assert saved.get_webhook_secrets() == ["store-a-webhook-secret"]
    assert _rail_changes(site) == []
    # The same store is saved as before.
    same = _rail_form(site, rail="woocommerce", connected_account="https://a.example")
    assert root.post(change, same).status_code == 302
    assert RailAccount.objects.get(pk=woo.pk).get_webhook_secrets() == ["store-a-webhook-secret"]


def test_another_woocommerce_store_is_not_connected_in_the_admin_on_the_first_ones_keys(
    mounted, root, site
):
    """The sibling of the secret rule: an account with no webhook secret yet still holds store
    A's consumer key and secret. The admin changed its address to store B and kept them, so
    Sill's refunds and order reads signed with A's keys went to B (the rails page refuses
    this: "the saved ones belong to …"). This form takes no consumer key: refused."""
    woo = RailAccount.objects.create(
        site=site, rail="woocommerce", enabled=False, connected_account="https://a.example"
    )
    woo.set_secret("ck_1:cs_1")
    woo.save()
    change = f"/django-admin/rails/railaccount/{woo.pk}/change/"
    for other in ("https://b.example", "https://a.example.evil"):
        form = _rail_form(site, rail="woocommerce", connected_account=other)
        page = _errors(root.post(change, form))
        assert "the saved consumer key and secret belong to https://a.example" in page, page
        assert "Connect another store on Settings → Rails" in page
    saved = RailAccount.objects.get(pk=woo.pk)
    assert (saved.connected_account, saved.get_secret()) == ("https://a.example", "ck_1:cs_1")
    assert _rail_changes(site) == []
    # The same store, written as WordPress may name it, is saved as before.
    same = _rail_form(site, rail="woocommerce", connected_account="https://A.example:443")
    assert root.post(change, same).status_code == 302
    assert RailAccount.objects.get(pk=woo.pk).get_secret() == "ck_1:cs_1"


# --- beat's schedules are read only -----------------------------------------------------------
# Before: a superuser could switch off (or re-time, re-point, delete) the schedules that sign
# checkpoints, reconcile the rails and name Stripe accounts, one by one or with the list's
# enable/disable/toggle actions, and no site's log said so. Their cadence is configuration
# (SILL_AUDIT_CHECKPOINT_MINUTES, SILL_RECONCILE_EVERY_MINUTES) and the rows come from
# migrations: the admin shows them and changes nothing.

TASKS = "/django-admin/django_celery_beat/periodictask/"


def test_beats_schedules_are_shown_and_cannot_be_changed_in_the_admin(mounted, root):
    checkpoints = PeriodicTask.objects.get(task="audit.write_checkpoints")
    every = checkpoints.interval
    assert root.get(TASKS).status_code == 200
    assert root.get(f"{TASKS}{checkpoints.pk}/change/").status_code == 200
    switched_off = {"name": checkpoints.name, "regtask": checkpoints.task, "task": "",
                    "interval": every.pk, "args": "[]", "kwargs": "{}", "_save": "Save"}  # fmt: skip
    rarely = {"every": "1000", "period": "days", "periodictask_set-TOTAL_FORMS": "0",
              "periodictask_set-INITIAL_FORMS": "0"}  # fmt: skip
    answers = [
        root.post(f"{TASKS}{checkpoints.pk}/change/", switched_off).status_code,
        root.post(f"{TASKS}add/", {**switched_off, "name": "another"}).status_code,
        root.post(f"{TASKS}{checkpoints.pk}/delete/", {"post": "yes"}).status_code,
        root.post(
            f"/django-admin/django_celery_beat/intervalschedule/{every.pk}/change/", rarely
        ).status_code,
    ]
    assert answers == [403, 403, 403, 403]
    for action in ("disable_tasks", "toggle_tasks", "delete_selected"):
        root.post(TASKS, {"action": action, "_selected_action": [checkpoints.pk]})
    assert PeriodicTask.objects.filter(pk=checkpoints.pk, enabled=True, interval=every).exists()
    assert (every.every, every.period) == (
        IntervalSchedule.objects.values_list("every", "period").get(pk=every.pk)
    )
