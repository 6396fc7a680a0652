"""Every URL pattern x method x role answers what tests/authorization_matrix.py says.

The URL conf is walked (through every include); a pattern without a row fails, naming the
pattern and how to add its row, and so does a row whose pattern is gone. Each (pattern,
method, role) is one test: the path arguments are built as objects of the primary site (only
the ones the row needs, so each test stays cheap), the request is sent with a minimal body,
and the answer is classified (allowed / 403 / 404 / login / 401 / 400). Nothing may answer
500, and a refused request, or any request by another site's owner, leaves the primary
site's audit chain as it was. A pattern whose row names GET alone is read-only: every other
method it is sent answers 405.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest
from django.conf import settings
from django.shortcuts import resolve_url
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, include, path, reverse
from django.urls.resolvers import RegexPattern
from django.utils import timezone

from audit.checkpoints import latest_checkpoint, write_checkpoint
from audit.models import AuditCheckpoint, AuditRecord
from policies.catalog import item_by_id
from policies.models import PolicyVersion
from policies.services import apply_catalog_item
from refunds.execution import RetryLater, execute_refund
from refunds.models import Refund, RefundReason
from refunds.reasons.services import add_reason, ensure_default_reasons
from refunds.reconcile.differences import Difference
from refunds.reconcile.inbox import open_item
from refunds.staff.services import create_staff_refund
from sill.accounts import two_factor
from sill.accounts.models import AgentToken, MemberInvite, Membership, MemberToken, Site
from sill.accounts.services import add_member, issue_agent_token, issue_member_token
from sill.orders.models import Charge, Order
from sill.rails.registry import ensure_mock_rail
from tests.accounts.two_factor_helpers import require_two_factor
from tests.authorization_matrix import (
    AGENT_ONLY,
    BAD_REQUEST,
    FORBIDDEN,
    LOGIN,
    MATRIX,
    NO_SECOND_FACTOR,
    NOT_FOUND,
    OK,
    ROLES,
    UNAUTHORIZED,
    Row,
)
from tests.conftest import site_owner
from tests.refunds.conftest import (
    hold_refund,
    post,
    purchase_intent,
    register_key,
    signed_body,
)

pytestmark = pytest.mark.django_db

# Patterns that are not Sill's: the Django admin (off unless SILL_ADMIN=1, and then gated by
# tests/test_admin_gate.py) and static files served in DEBUG.
NOT_SILLS = ("django-admin/", "^static")


@dataclass(frozen=True)
class Pattern:
    name: str  # namespace:name
    route: str  # the full route, converters included
    converters: dict[str, str]  # kwarg → converter name ("str", "int", …)


def _walk(resolver: URLResolver, prefix: str = "", namespace: str = "") -> Iterator[Pattern]:
    for entry in resolver.url_patterns:
        if isinstance(entry, URLResolver):
            inner = ":".join(n for n in (namespace, entry.namespace or "") if n)
            yield from _walk(entry, prefix + str(entry.pattern), inner)
        elif isinstance(entry, URLPattern):
            route = prefix + str(entry.pattern)
            if route.startswith(NOT_SILLS):
                continue
            name = f"{namespace}:{entry.name}" if namespace else str(entry.name)
            converters = {
                key: type(conv).__name__.removesuffix("Converter").lower()
                for key, conv in getattr(entry.pattern, "converters", {}).items()
            }
            yield Pattern(name=name, route=route, converters=converters)


def url_patterns() -> list[Pattern]:
    return list(_walk(get_resolver()))


# --- the table covers the URL conf, and only it ----------------------------------------------


def missing_rows(patterns: list[Pattern]) -> list[str]:
    """What to tell the author of each pattern that has no row in the matrix."""
    return [
        f"{p.name} ({p.route}, arguments {p.converters or 'none'}) has no row in "
        f"tests/authorization_matrix.py: add MATRIX[{p.name!r}] = row(args, GET=…, POST=…) "
        "with the answer each role should get"
        for p in patterns
        if p.name not in MATRIX
    ]


def test_it_has_a_row_for_every_url_pattern() -> None:
    missing = missing_rows(url_patterns())
    assert not missing, "\n".join(missing)


def test_it_names_a_new_pattern_that_has_no_row() -> None:
    def view(request: Any) -> None:  # never called
        return None

    gifts = path("", include(([path("gifts/<int:gift_id>/send/", view, name="send")], "gifts")))
    (message,) = missing_rows(list(_walk(URLResolver(RegexPattern(r"^/"), [gifts]))))
    assert message.startswith(
        "gifts:send (gifts/<int:gift_id>/send/, arguments {'gift_id': 'int'})"
    )
    assert "MATRIX['gifts:send'] = row(" in message


def test_it_names_no_pattern_that_is_gone() -> None:
    names = {p.name for p in url_patterns()}
    gone = sorted(set(MATRIX) - names)
    assert not gone, f"tests/authorization_matrix.py names patterns the URL conf lacks: {gone}"


def test_it_builds_every_path_argument_a_row_names() -> None:
    by_name = {p.name: p for p in url_patterns()}
    for name, entry in MATRIX.items():
        if name in by_name:
            assert set(entry.args) == set(by_name[name].converters), (name, entry.args)
            assert set(entry.args.values()) <= set(BUILDERS), (name, entry.args)


# role → (email, role on its site, can_refund): tests/conftest.py's personas; ``staff`` is its
# ``clerk`` (no refund permission), ``refunder`` its ``members["staff"]``, ``outsider`` the
# owner of ``other_site``.
PERSONAS: dict[str, tuple[str, str, bool]] = {
    "owner": ("owner@roasters.example", "owner", False),
    "admin": ("admin@roasters.example", "admin", False),
    "reviewer": ("reviewer@roasters.example", "reviewer", False),
    "staff": ("clerk@roasters.example", "staff", False),
    "refunder": ("staff@roasters.example", "staff", True),
    "outsider": ("owner@other.example", "owner", False),
}


# --- the objects path arguments point at ----------------------------------------------------


class Objects:
    """Builds, on demand, the primary site's objects a row's path arguments name."""

    def __init__(self, site: Site, other_site: Site, make_order: Any) -> None:
        self.site = site
        self.other_site = other_site
        self.make_order = make_order
        self.agent = site.agents.create(
            agent_id="agent_matrix", name="Matrix shopper", refund_enabled=True
        )

    def persona(self, role: str) -> Membership:
        """The member acting as ``role``: the personas of tests/conftest.py's ``members`` and
        ``clerk``, made one at a time (``add_member`` costs ~30 ms: making all six for each of
        ~500 tests would double the file's time)."""
        email, on_role, can_refund = PERSONAS[role]
        on = self.other_site if role == "outsider" else self.site
        return add_member(site=on, email=email, role=on_role, can_refund=can_refund)

    def order(self) -> Order:
        ensure_mock_rail(self.site)
        order: Order = self.make_order(total="89.00")
        return order

    def held(self) -> Refund:
        ensure_mock_rail(self.site)
        return hold_refund(order=self.make_order(total="89.00"), agent=self.agent)

    def attention(self, capture: Any) -> Refund:
        """A staff refund whose answer was lost, then the rail was switched off."""
        rail = ensure_mock_rail(self.site)
        rail.config = {"refund": "timeout_after_effect", "fail_times": 1}
        rail.save()
        ensure_default_reasons(self.site)
        with capture(execute=False):
            refund = create_staff_refund(
                site=self.site,
                order=self.make_order(total="25.00"),
                actor=self.persona("owner").user,
                kind="full",
                reason=RefundReason.objects.get(site=self.site, code="defective"),
            )
        with pytest.raises(RetryLater):
            execute_refund(refund.id)
        rail.enabled = False
        rail.save()
        with capture(execute=False):
            assert execute_refund(refund.id) == "needs_attention"
        return refund


def _reason(objects: Objects, request: pytest.FixtureRequest) -> str:
    return str(
        add_reason(site=objects.site, actor=site_owner(objects.site), name="Arrived broken").pk
    )


def _member(objects: Objects, request: pytest.FixtureRequest) -> str:
    target = add_member(site=objects.site, email="target@roasters.example", role="staff")
    return str(target.pk)


def _member_token(objects: Objects, request: pytest.FixtureRequest) -> str:
    target = add_member(site=objects.site, email="target@roasters.example", role="staff")
    token = issue_member_token(
        membership=target, actor=None, system=True, second_factor=two_factor.OPERATOR
    )
    return str(MemberToken.objects.get(prefix=token[:12]).pk)


def _agent_token(objects: Objects, request: pytest.FixtureRequest) -> str:
    token = issue_agent_token(
        agent=objects.agent, actor=None, system=True, second_factor=two_factor.OPERATOR
    )
    return str(AgentToken.objects.get(prefix=token[:12]).pk)


def _item(objects: Objects, request: pytest.FixtureRequest) -> str:
    charge = Charge.objects.get(order=objects.make_order(total="20.00", rail="stripe"))
    difference = Difference(
        kind="missing_at_rail",
        subject="rf_matrix",
        currency="USD",
        sill_amount_minor=2000,
        sill_status="succeeded",
        detail="Settled in Sill, not listed by the rail.",
    )
    open_item(charge=charge, difference=difference)
    return str(charge.order.site.reconciliation_items.get().pk)


def _rule(objects: Objects, request: pytest.FixtureRequest) -> str:
    item = item_by_id("r07")
    assert item is not None
    result = apply_catalog_item(site=objects.site, actor=site_owner(objects.site), item=item)
    return str(result.rules[0]["id"])


def _invite(objects: Objects) -> MemberInvite:
    """A pending invitation to the primary site, made directly (no email, no audit record),
    by an owner of it (an invite whose sender may no longer send it is withdrawn)."""
    now = timezone.now()
    inviter = add_member(site=objects.site, email="inviter@roasters.example", role="owner")
    return MemberInvite.objects.create(
        site=objects.site,
        email="invitee@roasters.example",
        role="staff",
        invited_by=inviter.user,
        token_sha256=hashlib.sha256(b"matrix-invite-token").hexdigest(),
        sent_at=now,
        expires_at=now + timedelta(hours=72),
    )


def _invite_token(objects: Objects, request: pytest.FixtureRequest) -> str:
    _invite(objects)
    return "matrix-invite-token"


def _version(objects: Objects) -> int:
    item = item_by_id("r07")
    assert item is not None
    apply_catalog_item(site=objects.site, actor=site_owner(objects.site), item=item)
    return PolicyVersion.objects.filter(site=objects.site).values_list("number", flat=True)[0]


def _checkpoint(objects: Objects) -> AuditCheckpoint:
    objects.held()  # its decision is in the log
    return write_checkpoint(site=objects.site) or latest_checkpoint(site_id=objects.site.pk)


def _logged_site(objects: Objects) -> str:
    _checkpoint(objects)
    return objects.site.pk


def _purchase(objects: Objects, request: pytest.FixtureRequest) -> str:
    """An order the matrix's agent placed with a signed purchase mandate (its decision is in
    the log; the charge is left to a worker that never runs here)."""
    register_key(objects.agent)
    ensure_mock_rail(objects.site)
    body = signed_body(
        purchase_intent(payment={"rail": "mock", "payment_method": "pm_visa"}),
        site_id=objects.site.pk,
        agent_id=objects.agent.agent_id,
    )
    with request.getfixturevalue("django_capture_on_commit_callbacks")(execute=False):
        answer = post(Client(), body)
    assert answer.status_code == 201, answer.content
    return str(answer.json()["order_id"])


def _mandate(objects: Objects, request: pytest.FixtureRequest) -> str:
    refund = objects.held()
    assert refund.mandate is not None
    return refund.mandate.mandate_id


BUILDERS: dict[str, Callable[[Objects, pytest.FixtureRequest], str]] = {
    "order": lambda o, r: str(o.order().pk),
    "held": lambda o, r: str(o.held().pk),
    "attention": lambda o, r: str(
        o.attention(r.getfixturevalue("django_capture_on_commit_callbacks")).pk
    ),
    "reason": _reason,
    "member": _member,
    "member_token": _member_token,
    "agent": lambda o, r: str(o.agent.pk),
    "key": lambda o, r: str(register_key(o.agent).pk),
    "agent_token": _agent_token,
    "rail": lambda o, r: ensure_mock_rail(o.site).rail,
    "item": _item,
    "rule": _rule,
    "template": lambda o, r: "r07",
    "mandate": _mandate,
    "purchase": _purchase,
    "site": lambda o, r: o.site.pk,
    "invite": lambda o, r: str(_invite(o).pk),
    "invite_token": _invite_token,
    "reset_uid": lambda o, r: "MTIzNDU2",
    "reset_token": lambda o, r: "set-password",
    "logged_site": lambda o, r: _logged_site(o),
    "checkpoint_size": lambda o, r: str(_checkpoint(o).tree_size),
    "version": lambda o, r: str(_version(o)),
}


# Path arguments that are no secret of the primary site (a catalog id, a rail's name, the
# site id a webhook or API path carries).
PUBLIC_ARGS = {
    "template",
    "rail",
    "site",
    "reset_uid",
    "reset_token",
    "logged_site",
    "checkpoint_size",
}


# --- one test per (pattern, method, role) ------------------------------------------------


def _cases() -> Iterator[Any]:
    for name, entry in MATRIX.items():
        for method, per_role in entry.methods.items():
            for role in ROLES:
                expected = per_role[role]
                yield pytest.param(
                    name, method, role, expected, id=f"{name} {method} {role} -> {expected}"
                )


def _client(role: str, objects: Objects) -> Client:
    """A client signed in as ``role`` (none for ``anonymous``)."""
    client = Client()  # CSRF checks off, as for any client that sent its token
    if role != "anonymous":
        client.force_login(objects.persona(role).user)
    return client


def _send(client: Client, method: str, url: str, entry: Row) -> Any:
    """``method`` on ``url`` with a minimal body: JSON to the API and webhooks, else the row's
    form."""
    if method == "GET":
        return client.get(url)
    if url.startswith(("/api/", "/webhooks/")):
        return client.generic(method, url, data=b"{}", content_type="application/json")
    return client.generic(
        method,
        url,
        data=urlencode(entry.body),
        content_type="application/x-www-form-urlencoded",
    )


def _answer(response: Any) -> str:
    """The class of ``response``: login, 401, 403, 404, 405, a 5xx status, or allowed."""
    status = response.status_code
    location = urlsplit(response.get("Location", "")).path
    if status in (302, 303) and location == resolve_url(settings.LOGIN_URL):
        return LOGIN
    if status in (401, 403, 404, 405):  # 405: the row names a method the view does not take
        return str(status)
    return str(status) if status >= 500 else OK


@pytest.mark.parametrize(("name", "method", "role", "expected"), list(_cases()))
def test_it(
    request: pytest.FixtureRequest,
    site: Site,
    other_site: Site,
    make_order: Any,
    name: str,
    method: str,
    role: str,
    expected: str,
) -> None:
    entry = MATRIX[name]
    objects = Objects(site, other_site, make_order)
    kwargs = {key: BUILDERS[kind](objects, request) for key, kind in entry.args.items()}
    url = reverse(name, kwargs=kwargs)
    client = _client(role, objects)
    before = AuditRecord.objects.filter(site=site).count()

    response = _send(client, method, url, entry)

    got = _answer(response)
    assert response.status_code < 500, (url, response.status_code)
    if expected == BAD_REQUEST:
        assert response.status_code == 400, (url, response.status_code, response.content[:300])
    else:
        assert got == expected, (url, response.status_code, response.content[:300])
    if role == "outsider":
        # Another site's owner may reach their own site's pages, never the primary site's data.
        shown = response.content.decode(errors="replace")
        private = [site.name] + [
            value
            for key, value in kwargs.items()
            if entry.args[key] not in PUBLIC_ARGS and not value.isdigit()
        ]
        leaked = [text for text in private if text in shown]
        assert not leaked, f"another site's owner was shown {leaked} at {url}"
    refused = expected in (FORBIDDEN, NOT_FOUND, LOGIN, UNAUTHORIZED, BAD_REQUEST)
    if refused or role == "outsider":
        after = AuditRecord.objects.filter(site=site).count()
        assert after == before, f"{role} was refused ({got}) yet the primary site's log grew"


# --- a site that requires two factors: every change of an owner's asks for one -------------------

CHANGES = ("POST", "PUT", "PATCH", "DELETE")


def _owner_changes() -> Iterator[Any]:
    for name, entry in MATRIX.items():
        for method, per_role in entry.methods.items():
            if method in CHANGES and per_role["owner"] == OK and name not in NO_SECOND_FACTOR:
                yield pytest.param(name, method, id=f"{name} {method}")


def test_it_names_no_exemption_from_the_second_factor_that_is_gone() -> None:
    changes = {
        name
        for name, entry in MATRIX.items()
        for method, per_role in entry.methods.items()
        if method in CHANGES and per_role["owner"] == OK
    }
    gone = sorted(set(NO_SECOND_FACTOR) - changes)
    assert not gone, f"NO_SECOND_FACTOR names what is no owner's change: {gone}"


@pytest.mark.parametrize(("name", "method"), list(_owner_changes()))
def test_a_change_needs_the_second_factor_where_the_site_requires_it(
    request: pytest.FixtureRequest,
    site: Site,
    other_site: Site,
    make_order: Any,
    name: str,
    method: str,
) -> None:
    entry = MATRIX[name]
    objects = Objects(site, other_site, make_order)
    kwargs = {key: BUILDERS[kind](objects, request) for key, kind in entry.args.items()}
    url = reverse(name, kwargs=kwargs)
    require_two_factor(site)
    client = _client("owner", objects)  # no authenticator: nothing verified this session
    before = AuditRecord.objects.filter(site=site).count()

    response = _send(client, method, url, entry)

    shown = response.content.decode(errors="replace")
    refused = "two_factor_required" in shown or "Two-factor authentication needed" in shown
    assert response.status_code == 403 and refused, (
        f"{name} {method} answered {response.status_code} without asking for the second "
        "factor: guard the view (site_view with a capability of access.TWO_FACTOR_CAPS), or "
        "say why it needs none in NO_SECOND_FACTOR (tests/authorization_matrix.py)"
    )
    assert AuditRecord.objects.filter(site=site).count() == before


# --- a read-only page takes GET alone (and HEAD) ---------------------------------------------


def _read_only() -> Iterator[Any]:
    for name, entry in MATRIX.items():
        if set(entry.methods) == {"GET"}:
            yield pytest.param(name, id=name)


def _reader(name: str, entry: Row, objects: Objects) -> Client:
    """A client the row lets read the page (or the one every role is sent to, as the login
    page is for a code step with no sign-in pending)."""
    if entry.methods["GET"] == AGENT_ONLY:
        token = issue_agent_token(
            agent=objects.agent, actor=None, system=True, second_factor=two_factor.OPERATOR
        )
        return Client(headers={"Authorization": f"Bearer {token}"})
    readers = [role for role in ROLES if entry.methods["GET"][role] == OK]
    if not readers and len(set(entry.methods["GET"].values())) == 1:
        readers = ["anonymous"]
    assert readers, f"{name}: nobody in the matrix may read it"
    return _client(readers[0], objects)


def _assert_head_answers_as_get(name: str, client: Client, url: str) -> None:
    """HEAD is GET without the body (which the server drops, as the test client does): an
    uptime monitor's ``HEAD /`` got 405 from views under require_GET."""
    head, get = client.head(url), client.get(url)
    assert (head.status_code, head.get("Location")) == (get.status_code, get.get("Location")), (
        f"{name} answered HEAD {head.status_code} where GET is {get.status_code}: decorate "
        "its view with require_safe (require_GET refuses HEAD), or name HEAD beside GET"
    )
    assert head.get("Content-Type") == get.get("Content-Type"), name


@pytest.mark.parametrize("name", list(_read_only()))
def test_a_read_only_page_refuses_every_other_method(
    request: pytest.FixtureRequest,
    site: Site,
    other_site: Site,
    make_order: Any,
    name: str,
) -> None:
    """Sent by someone who may read it, as a page of the site would send it (the client skips
    the CSRF check, as a valid token passes it): a POST, PUT, PATCH or DELETE to a page that
    changes nothing is 405, never the page (the orders, refunds, held, reconciliation and
    activity pages rendered it). HEAD answers as GET does."""
    entry = MATRIX[name]
    objects = Objects(site, other_site, make_order)
    kwargs = {key: BUILDERS[kind](objects, request) for key, kind in entry.args.items()}
    url = reverse(name, kwargs=kwargs)
    client = _reader(name, entry, objects)
    before = AuditRecord.objects.filter(site=site).count()

    answers = {method: _send(client, method, url, entry).status_code for method in CHANGES}

    assert answers == dict.fromkeys(CHANGES, 405), (
        f"{name} takes only GET in tests/authorization_matrix.py, yet answered {answers}: "
        "decorate its view with require_safe (or give its class http_method_names)"
    )
    assert AuditRecord.objects.filter(site=site).count() == before
    _assert_head_answers_as_get(name, client, url)


def _forms() -> Iterator[Any]:
    for name, entry in MATRIX.items():
        if "GET" in entry.methods and set(entry.methods) != {"GET"}:
            yield pytest.param(name, id=name)


@pytest.mark.parametrize("name", list(_forms()))
def test_a_page_with_a_form_answers_head_as_get(
    request: pytest.FixtureRequest,
    site: Site,
    other_site: Site,
    make_order: Any,
    name: str,
) -> None:
    """A page that also takes a POST (a form, the rules API) answers HEAD as GET too: the
    code step, the invitation and the second factor's pages named GET and POST alone."""
    entry = MATRIX[name]
    objects = Objects(site, other_site, make_order)
    kwargs = {key: BUILDERS[kind](objects, request) for key, kind in entry.args.items()}
    client = _reader(name, entry, objects)

    _assert_head_answers_as_get(name, client, reverse(name, kwargs=kwargs))
