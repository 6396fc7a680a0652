"""Rules pages: every role on every page, wrong sites, toggles (htmx and plain), forms."""

from __future__ import annotations

import html

import pytest
from django.test import Client

from audit.models import AuditRecord
from policies.models import PolicyVersion
from policies.selectors import active_policy_for
from refunds.models import Refund

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}
EDITORS = ["owner", "admin"]
READERS = ["reviewer", "staff"]


@pytest.fixture
def with_rules(apply_template):
    apply_template("conservative")
    apply_template("needs-reason", mode="observe")


# --- who may open what ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("persona", "expected"),
    [("owner", 200), ("admin", 200), ("reviewer", 200), ("staff", 200), ("outsider", 200),
     ("anonymous", 302)],
)  # fmt: skip
@pytest.mark.parametrize("url", ["/rules/", "/rules/templates/"])
def test_every_member_reads_the_rules_pages(client_for, with_rules, persona, expected, url):
    response = client_for(persona).get(url)
    assert response.status_code == expected
    if expected == 302:
        assert response["Location"].startswith("/login/?next=")


@pytest.mark.parametrize(
    ("persona", "expected"),
    [("owner", 200), ("admin", 200), ("reviewer", 403), ("staff", 403), ("outsider", 200),
     ("anonymous", 302)],
)  # fmt: skip
def test_only_owners_and_admins_preview_a_template(client_for, persona, expected):
    response = client_for(persona).get("/rules/templates/conservative/")
    assert response.status_code == expected


@pytest.mark.parametrize(
    ("persona", "expected"),
    [("owner", 302), ("admin", 302), ("reviewer", 403), ("staff", 403), ("outsider", 404),
     ("anonymous", 302)],
)  # fmt: skip
@pytest.mark.parametrize(
    ("url", "data"),
    [
        ("/rules/tpl-conservative/mode/", {"mode": "observe"}),
        ("/rules/tpl-conservative/delete/", {}),
    ],
)
def test_only_owners_and_admins_of_the_site_change_a_rule(
    client_for, with_rules, site, persona, expected, url, data
):
    response = client_for(persona).post(url, data)
    assert response.status_code == expected
    changed = active_policy_for(site).label != "v3"
    assert changed is (persona in EDITORS)
    if persona == "anonymous":
        assert response["Location"].startswith("/login/")


# The outsider's POST acts on the outsider's own site (the session's site): 302, ours untouched.
@pytest.mark.parametrize(
    ("persona", "expected"),
    [("owner", 302), ("admin", 302), ("reviewer", 403), ("staff", 403), ("outsider", 302),
     ("anonymous", 302)],
)  # fmt: skip
def test_only_owners_and_admins_set_auto_refund(client_for, site, persona, expected):
    data = {"enabled": "on", "cap": "25.00", "currency": "USD"}
    response = client_for(persona).post("/rules/auto-refund/", data)
    assert response.status_code == expected
    assert active_policy_for(site).auto_refund.enabled is (persona in EDITORS)


@pytest.mark.parametrize(
    ("persona", "expected"),
    [("owner", 302), ("admin", 302), ("reviewer", 403), ("staff", 403), ("outsider", 302),
     ("anonymous", 302)],
)  # fmt: skip
def test_only_owners_and_admins_apply_a_template(client_for, site, persona, expected):
    response = client_for(persona).post(
        "/rules/templates/conservative/apply/", {"mode": "enforced"}
    )
    assert response.status_code == expected
    assert bool(active_policy_for(site).rules) is (persona in EDITORS)


# --- wrong site -----------------------------------------------------------------------------


def test_an_outsider_sees_and_changes_only_their_own_sites_rules(
    client_for, with_rules, site, other_site
):
    outsider = client_for("outsider")
    body = outsider.get("/rules/").content.decode()
    assert "tpl-conservative" not in body and "v1-default" in body
    # Their forms act on their own site, never on ours.
    outsider.post("/rules/auto-refund/", {"enabled": "on", "cap": "10.00", "currency": "USD"})
    outsider.post("/rules/templates/r07/apply/", {"mode": "enforced"})
    assert [r["id"] for r in active_policy_for(other_site).rules] == ["r07"]
    assert active_policy_for(other_site).auto_refund.enabled
    ours = active_policy_for(site)
    assert ours.label == "v3" and not ours.auto_refund.enabled
    assert [r["id"] for r in ours.rules] == ["tpl-conservative", "tpl-needs-reason"]


def test_an_owner_cannot_touch_a_rule_only_another_site_has(client_for, apply_template, other_site):
    apply_template("r07", on_site=other_site)
    owner = client_for("owner")
    assert owner.post("/rules/r07/mode/", {"mode": "observe"}).status_code == 404
    assert owner.post("/rules/r07/delete/").status_code == 404
    assert active_policy_for(other_site).rules[0]["mode"] == "enforced"


# --- what each role sees --------------------------------------------------------------------


def test_the_rules_page_lists_rules_with_their_modes(client_for, with_rules):
    body = client_for("owner").get("/rules/").content.decode()
    assert "tpl-conservative" in body and "Refund amount in USD &gt; $50.00" in body
    assert "Hold for approval" in body and ">Observe<" in body and ">Enforced<" in body
    assert 'action="/rules/tpl-conservative/mode/"' in body
    assert 'action="/rules/auto-refund/"' in body
    assert "v3" in body


def test_readers_see_no_forms(client_for, with_rules, auto_refund):
    auto_refund("25.00")
    for persona in READERS:
        body = client_for(persona).get("/rules/").content.decode()
        assert "tpl-conservative" in body
        assert "/mode/" not in body and "/delete/" not in body
        assert 'action="/rules/auto-refund/"' not in body
        assert 'Auto-approve refunds under cap: <strong id="auto-refund-state">On' in body
        assert "$25.00" in body
        assert "Only owners and admins can change rules." in body
        gallery = client_for(persona).get("/rules/templates/").content.decode()
        assert "Support agent with refunds" in gallery and "Preview</button>" not in gallery


def test_the_baseline_is_explained_when_there_are_no_rules(client_for):
    body = client_for("reviewer").get("/rules/").content.decode()
    assert "v1-default" in body and "never holds refunds" in body


# --- toggles and deletes ----------------------------------------------------------------------


def test_a_toggle_without_javascript_redirects_with_a_message(client_for, with_rules, site):
    response = client_for("admin").post(
        "/rules/tpl-conservative/mode/", {"mode": "observe"}, follow=True
    )
    assert response.redirect_chain == [("/rules/", 302)]
    # Named by its title, then its id, as the Rules page lists it (it said "Rule
    # tpl-conservative is now observe": the id and the mode's code).
    assert (
        "Rule “Conservative / manual review” (tpl-conservative) is now observed only."
        in html.unescape(response.content.decode())
    )
    assert active_policy_for(site).rule("tpl-conservative")["mode"] == "observe"


def test_a_toggle_with_htmx_swaps_the_rules_section(client_for, with_rules, site):
    response = client_for("owner").post(
        "/rules/tpl-needs-reason/mode/", {"mode": "enforced"}, headers=HTMX
    )
    body = html.unescape(response.content.decode())
    assert response.status_code == 200
    assert body.lstrip().startswith('<section id="rules-section"') and "<html" not in body
    assert "Rule “Refunds need a reason” (tpl-needs-reason) is now enforced." in body
    assert "v4" in body
    # The history is refreshed out of band: the new version is listed.
    assert '<section id="versions" hx-swap-oob="true">' in body
    assert "Rule “Refunds need a reason” (tpl-needs-reason) now enforced" in body


def test_a_delete_with_htmx(client_for, with_rules, site):
    response = client_for("owner").post("/rules/tpl-conservative/delete/", headers=HTMX)
    assert response.status_code == 200
    deleted = "Rule “Conservative / manual review” (tpl-conservative) deleted."
    assert deleted in html.unescape(response.content.decode())
    assert [r["id"] for r in active_policy_for(site).rules] == ["tpl-needs-reason"]


@pytest.mark.parametrize("mode", ["", "shadow"])
def test_a_bad_mode_is_refused_and_nothing_is_written(client_for, with_rules, site, mode):
    response = client_for("owner").post("/rules/tpl-conservative/mode/", {"mode": mode})
    assert response.status_code == 422
    assert "Unknown mode" in response.content.decode()
    assert active_policy_for(site).label == "v3"


def test_state_changes_need_csrf(members, with_rules, site):
    client = Client(enforce_csrf_checks=True)
    client.force_login(members["owner"].user)
    for url, data in [
        ("/rules/tpl-conservative/mode/", {"mode": "observe"}),
        ("/rules/tpl-conservative/delete/", {}),
        ("/rules/auto-refund/", {"cap": "1.00", "currency": "USD"}),
        ("/rules/templates/r07/apply/", {}),
    ]:
        assert client.post(url, data).status_code == 403
    assert active_policy_for(site).label == "v3"


def test_every_change_needs_post(client_for, with_rules):
    owner = client_for("owner")
    for url in [
        "/rules/tpl-conservative/mode/",
        "/rules/tpl-conservative/delete/",
        "/rules/auto-refund/",
        "/rules/templates/r07/apply/",
    ]:
        assert owner.get(url).status_code == 405


# --- AUTO-REFUND ------------------------------------------------------------------------------


def test_auto_refund_is_switched_on_and_shown(client_for, site):
    owner = client_for("owner")
    response = owner.post(
        "/rules/auto-refund/", {"enabled": "on", "cap": "25.00", "currency": "USD"}, follow=True
    )
    assert "Auto-refund is on, cap $25.00" in response.content.decode()
    auto = active_policy_for(site).auto_refund
    assert (auto.enabled, auto.cap_minor, auto.currency) == (True, 2500, "USD")
    # ...and off again, keeping the cap.
    owner.post("/rules/auto-refund/", {"cap": "25.00", "currency": "USD"})
    assert not active_policy_for(site).auto_refund.enabled


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"enabled": "on", "cap": "lots", "currency": "USD"}, "Enter an amount such as 25.00"),
        ({"enabled": "on", "cap": "1.001", "currency": "USD"}, "at most 2 decimal"),
        ({"enabled": "on", "cap": "-1", "currency": "USD"}, "cannot be negative"),
        ({"enabled": "on", "cap": "0", "currency": "USD"}, "above zero"),
        ({"enabled": "on", "cap": "10", "currency": "XXX"}, "Select a valid choice"),
        ({"enabled": "on", "currency": "USD"}, "This field is required"),
    ],
)
def test_a_bad_auto_refund_form_is_refused_and_nothing_is_written(client_for, site, data, message):
    response = client_for("admin").post("/rules/auto-refund/", data)
    assert response.status_code == 422
    assert message in response.content.decode()
    assert not PolicyVersion.objects.filter(site=site).exists()
    assert not AuditRecord.objects.filter(site=site).exists()


def test_a_bad_auto_refund_form_with_htmx_re_renders_the_form(client_for, site):
    response = client_for("admin").post(
        "/rules/auto-refund/", {"enabled": "on", "cap": "x", "currency": "USD"}, headers=HTMX
    )
    body = response.content.decode()
    assert response.status_code == 422
    assert body.lstrip().startswith('<section id="auto-refund"') and 'aria-invalid="true"' in body


# --- the gallery, preview and apply -------------------------------------------------------------


def test_the_gallery_lists_templates_and_packs_with_their_parameters(client_for, apply_template):
    apply_template("disputed-deny")
    body = client_for("owner").get("/rules/templates/").content.decode()
    for title in ("Support agent with refunds", "Conservative / manual review", "Human review"):
        assert title in body
    assert 'name="holdOverUsd" value="50.00"' in body and 'name="oldChargeDays" value="60"' in body
    assert "Partly applied" in body and "Applied</span>" in body


def test_a_preview_shows_the_rules_and_the_last_30_days_and_writes_nothing(client_for, site):
    Refund.objects.create(
        site=site, origin="agent", amount_minor=6000, currency="USD", decision="approved",
        status="succeeded", facts=None,
    )  # fmt: skip
    response = client_for("owner").get(
        "/rules/templates/support-refunds/", {"largeRefundUsd": "100.00", "mode": "observe"}
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert "tpl-large-refund" in body and "$100.00" in body and "(observed only)" in body
    assert "stored without a fact snapshot" in body
    assert 'name="largeRefundUsd" value="100.00"' in body
    assert "Apply 4 rules (observed only)" in body
    assert not PolicyVersion.objects.filter(site=site).exists()


def test_a_preview_with_htmx_answers_the_preview_section(client_for):
    response = client_for("owner").get(
        "/rules/templates/conservative/", headers={**HTMX, "HX-Target": "preview"}
    )
    assert response.content.decode().lstrip().startswith('<section id="preview"')


def test_a_preview_with_a_bad_parameter_says_what_is_wrong(client_for):
    response = client_for("owner").get("/rules/templates/conservative/", {"holdOverUsd": "5O"})
    assert response.status_code == 422
    assert "Hold refunds over (USD) is an amount in US dollars" in response.content.decode()


def test_an_unknown_template_is_not_found(client_for):
    assert client_for("owner").get("/rules/templates/nope/").status_code == 404
    assert client_for("owner").post("/rules/templates/nope/apply/").status_code == 404


def test_apply_writes_the_rules_and_applying_again_says_already_applied(client_for, site):
    owner = client_for("owner")
    data = {"holdOverUsd": "60.00", "mode": "enforced"}
    response = owner.post("/rules/templates/conservative/apply/", data, follow=True)
    assert response.redirect_chain == [("/rules/", 302)]
    assert (
        "Applied “Conservative / manual review” (tpl-conservative), enforced. Active policy: v2."
        in html.unescape(response.content.decode())
    )
    assert active_policy_for(site).rule("tpl-conservative")["when"] == {
        "refundAmountUsd": {"gt": 6000}
    }
    again = owner.post("/rules/templates/conservative/apply/", data, follow=True)
    assert "Already applied: “Conservative / manual review” (tpl-conservative) is there." in (
        html.unescape(again.content.decode())
    )
    assert PolicyVersion.objects.filter(site=site).count() == 1


def test_apply_with_htmx_redirects_through_the_header(client_for):
    response = client_for("admin").post("/rules/templates/r07/apply/", {}, headers=HTMX)
    assert (response.status_code, response["HX-Redirect"]) == (204, "/rules/")


def test_apply_with_a_bad_parameter_writes_nothing(client_for, site):
    response = client_for("owner").post(
        "/rules/templates/old-charge/apply/", {"oldChargeDays": "-3", "mode": "enforced"}
    )
    assert response.status_code == 422
    assert "Older than (days) is a whole number" in response.content.decode()
    assert not PolicyVersion.objects.filter(site=site).exists()
    assert not AuditRecord.objects.filter(site=site).exists()


def test_the_nav_links_the_rules_page(client_for):
    assert 'href="/rules/"' in client_for("staff").get("/rules/").content.decode()


def test_a_credit_templates_preview_replays_the_sites_credits(client_for, site):
    """Seen before: the preview of "Credits to new customers wait for a human" replayed
    refunds only: no credit, not even the template's own rule in the table."""
    from policies.vocabulary import FACTS_VERSION
    from sill.orders.models import Customer

    customer = Customer.objects.create(site=site, email="new@example.com", rail_customer_id="cus_N")
    credit = Refund.objects.create(
        site=site, kind="customer_credit", customer=customer, origin="agent", amount_minor=2500,
        currency="USD", rail="stripe", decision="approved", status="succeeded",
        facts={
            "factsVersion": FACTS_VERSION, "refundAmount": 2500, "refundAmountUsd": 2500,
            "creditCustomerAgeDays": 2, "refundAgentTotalTodayUsd": 2500,
            "refundReason": "goodwill", "refundOrigin": "agent", "rail": "stripe",
            "currency": "USD",
        },
    )  # fmt: skip
    response = client_for("owner").get("/rules/templates/credit-new-customer/")
    assert response.status_code == 200
    body = response.content.decode()
    refunds, credits = body.split('id="preview-credits"')
    assert "No refund requests in the last 30 days" in refunds
    assert "tpl-credit-new-customer" not in refunds.split('id="preview-table"')[1]
    assert 'id="preview-credit-table"' in credits
    assert "tpl-credit-new-customer" in credits.split('id="preview-credit-table"')[1]
    assert "Credits it would have decided differently" in credits
    assert f"/refunds/{credit.pk}/" in credits and "$25.00" in credits
    assert "Auto-refunded" not in credits
    assert not PolicyVersion.objects.filter(site=site).exists()


def test_a_preview_names_each_rule_as_the_rules_page_does(client_for, apply_template):
    """Seen: a preview's per-rule table and its "Rules it writes" list named each rule by its
    id only ("tpl-conservative", "r07"), where the Rules page shows the rule's title with its
    id beneath. Both now show the title first, the id after it."""
    apply_template("conservative")
    body = client_for("owner").get("/rules/templates/r07/").content.decode()
    table = body.split('id="preview-table"', 1)[1].split("</table>", 1)[0]
    for title, rule_id in [
        ("Conservative / manual review", "tpl-conservative"),
        ("Human review on destructive actions (r07)", "r07"),
    ]:
        assert f'<strong>{title}</strong><br><code class="small">{rule_id}</code>' in table
    written = body.split('id="preview-rules"', 1)[1].split("</ul>", 1)[0]
    assert (
        '<strong>Human review on destructive actions (r07)</strong> <code class="small">r07'
        "</code>: Origin is “agent” → <strong>Hold for approval</strong>"
    ) in written
    # A rule already there is named so too (it was "<code>tpl-conservative</code> (enforced)").
    again = html.unescape(
        client_for("owner").get("/rules/templates/conservative/").content.decode()
    )
    assert (
        "Already applied: “Conservative / manual review” (<code>tpl-conservative</code>, "
        "enforced) is there"
    ) in again


def test_the_facts_table_names_each_fact_as_the_rules_do(client_for):
    """Seen: "Facts a rule can read" listed each fact by its code alone
    (refundCustomerRefunds30d), while the rules above it and the Protected refunds form name
    it in words ("Customer's Sill refunds (30 days)"): nothing tied one to the other. Each
    fact now shows its words first, then the code the rules API takes."""
    body = client_for("reviewer").get("/rules/").content.decode()
    facts = body.split('<details id="facts">', 1)[1].split("</table>", 1)[0]
    assert (
        "<td><strong>Customer&#x27;s Sill refunds (30 days)</strong><br>"
        '<code class="small">refundCustomerRefunds30d</code></td>'
    ) in facts
    assert '<strong>Refund amount in USD</strong><br><code class="small">refundAmountUsd' in facts


@pytest.mark.parametrize("action", ["allow", "require_approval", "deny"])
def test_an_action_has_one_name_everywhere(client_for, site, owner, apply_template, action):
    """Seen: the Rules page and a preview called an allow rule "Allow" where a refund's page,
    its timeline, the held list, the emails and Slack (refunds.labels.action_label) said
    "Refund automatically" for the same rule. One action now has one name: the Rules page's
    Then column, a preview's per-rule table, and the change's summary in the History, the
    Activity page and its CSV all use the words the refund pages use."""
    from policies.services import add_rule
    from refunds.labels import action_label

    words = action_label(action)
    rule = {"id": "my-rule", "when": {"refundReason": "other"}, "then": {"action": action}}
    add_rule(site=site, actor=owner, rule=rule)
    owner_client = client_for("owner")
    page = html.unescape(owner_client.get("/rules/").content.decode())
    row = page.split('<tr id="rule-my-rule">', 1)[1].split("</tr>", 1)[0]
    then = row.split("</ul></td>", 1)[1].split("</td>", 1)[0]
    assert f">{words}</span>" in then
    summary = f"added: {words.lower()}"
    assert summary in page.split('id="versions"', 1)[1]
    preview = owner_client.get("/rules/templates/r07/").content.decode()
    cell = preview.split('id="preview-table"', 1)[1].split('<code class="small">my-rule', 1)[1]
    assert f">{words}</span>" in cell.split("</td>", 2)[1]
    activity = html.unescape(owner_client.get("/activity/").content.decode())
    assert summary in activity
    csv = owner_client.get("/activity/", {"format": "csv"})
    assert summary in b"".join(csv.streaming_content).decode()
