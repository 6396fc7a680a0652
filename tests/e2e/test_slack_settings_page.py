"""Settings → Slack as an owner: the bot token field (not set, then set) and a member's Slack
link that Slack does not confirm (a Slack user the workspace lacks, another person's user).
Each refusal is said beside its box, and each member's link state in words (not linked,
waiting for Slack to confirm, linked with or without its workspace recorded). Every state at a laptop (1280) and a phone (390) width:
screenshot under screenshot_dir()/slack/, no sideways scroll, nothing cut off, axe-core."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.utils import timezone
from playwright.sync_api import Browser, Page, expect

from refunds.demo import DEMO_PASSWORD, DEMO_SITE_ID, load_demo
from sill.accounts.models import Membership, Site
from tests.e2e.accessibility import (
    ConsoleErrors,
    clipped_content,
    horizontal_overflow,
    run_axe,
)
from tests.refunds.slack_stub import TOKEN, SlackStub, StubServer

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

VIEWPORTS = {"laptop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
OWNER = "owner@northwind-coffee.example"
ADMIN = "admin@northwind-coffee.example"
STAFF = "staff@northwind-coffee.example"
REVIEWER = "reviewer@northwind-coffee.example"


@pytest.fixture
def slack(settings) -> Iterator[SlackStub]:
    with StubServer() as stub:
        settings.SILL_SLACK_API_URL = stub.url
        stub.add_user("U0NWOWNER", OWNER)
        stub.add_user("U0NWADMIN", ADMIN)
        yield stub


@pytest.fixture
def shots(screenshot_dir):
    path = screenshot_dir / "slack"
    path.mkdir(parents=True, exist_ok=True)
    return path


def member_box(page: Page, email: str):
    return page.get_by_label(f"Slack member ID of {email}")


def problems_on(page: Page, errors: ConsoleErrors, *, label: str, phone: bool) -> list[str]:
    found = clipped_content(page) + run_axe(page) + errors.take(expected_status=422)
    if phone and (overflow := horizontal_overflow(page)):
        found.append(overflow)
    return [f"{label}: {line}" for line in found]


def test_the_slack_page_says_each_refusal_beside_its_box(
    browser: Browser, live_server, slack: SlackStub, shots
):
    load_demo()
    admin = Membership.objects.get(site_id=DEMO_SITE_ID, user__email=ADMIN)
    problems: list[str] = []
    for viewport, size in VIEWPORTS.items():
        Membership.objects.filter(site_id=DEMO_SITE_ID).update(
            slack_user_id="", slack_checked_at=None, slack_team_id=""
        )
        Site.objects.filter(pk=DEMO_SITE_ID).update(slack_bot_token_sealed=b"")
        context = browser.new_context(viewport=size, bypass_csp=True)
        page = context.new_page()
        errors = ConsoleErrors(page)
        page.goto(f"{live_server.url}/login/")
        page.get_by_label("Email").fill(OWNER)
        page.get_by_label("Password").fill(DEMO_PASSWORD)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url(lambda url: "/login/" not in url)
        phone = viewport == "phone"

        # No bot token yet: a link is refused for it, beside the member's box.
        page.goto(f"{live_server.url}/settings/slack/")
        expect(page.get_by_role("heading", name="Slack", exact=True)).to_be_visible()
        page.screenshot(path=shots / f"slack-no-token-{viewport}.png", full_page=True)
        problems += problems_on(page, errors, label=f"{viewport} no token", phone=phone)
        member_box(page, ADMIN).fill("U0NWADMIN")
        page.get_by_role("button", name="Save").click()
        box = member_box(page, ADMIN)
        expect(box).to_have_attribute("aria-invalid", "true")
        described = page.locator(f"#{box.get_attribute('aria-describedby')}")
        expect(described).to_contain_text("without the app's bot token")
        page.screenshot(path=shots / f"slack-link-refused-no-token-{viewport}.png", full_page=True)
        problems += problems_on(page, errors, label=f"{viewport} refused, no token", phone=phone)

        # The token saved; a Slack user the workspace lacks and another person's are refused.
        page.get_by_label("Bot token").fill(TOKEN)
        member_box(page, ADMIN).fill("")
        page.get_by_role("button", name="Save").click()
        expect(page.get_by_text("Slack settings saved.")).to_be_visible()
        expect(page.locator("form.slack-form")).to_contain_text("Bot token (set)")
        member_box(page, ADMIN).fill("U0NWOWNER")
        member_box(page, OWNER).fill("U0NOBODY")
        page.get_by_role("button", name="Save").click()
        for email, words in ((ADMIN, "does not have the email"), (OWNER, "has no user U0NOBODY")):
            box = member_box(page, email)
            expect(box).to_have_attribute("aria-invalid", "true")
            expect(page.locator(f"#{box.get_attribute('aria-describedby')}")).to_contain_text(words)
        page.screenshot(path=shots / f"slack-link-refused-{viewport}.png", full_page=True)
        problems += problems_on(page, errors, label=f"{viewport} refused", phone=phone)
        assert Membership.objects.get(pk=admin.pk).slack_user_id == ""

        # Every link state at once, said beside each box.
        states = {
            OWNER: ("U0NWOWNER", timezone.now(), "T0NORTHWIND", "Linked (confirmed by Slack)"),
            ADMIN: ("U0NWADMIN", timezone.now(), "", "Workspace not recorded yet"),
            STAFF: ("U0NWSTAFF", None, "", "Waiting for Slack to confirm"),
        }
        for email, (slack_user_id, checked_at, team_id, _) in states.items():
            Membership.objects.filter(site_id=DEMO_SITE_ID, user__email=email).update(
                slack_user_id=slack_user_id, slack_checked_at=checked_at, slack_team_id=team_id
            )
        page.goto(f"{live_server.url}/settings/slack/")
        for email, (*_, words) in states.items():
            box = member_box(page, email)
            expect(page.locator(f"#{box.get_attribute('aria-describedby')}")).to_contain_text(words)
        described = member_box(page, REVIEWER).get_attribute("aria-describedby")
        expect(page.locator(f"#{described}")).to_have_text("Not linked")
        page.screenshot(path=shots / f"slack-link-states-{viewport}.png", full_page=True)
        problems += problems_on(page, errors, label=f"{viewport} link states", phone=phone)
        context.close()
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems)
