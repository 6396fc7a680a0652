"""An invitation's email is sent inside its transaction (a refused send saves nothing), and an
SMTP server can be slow: what that transaction holds while it waits must not hold the site's
decisions.

Seen (on-call, with an SMTP server that took the connection and never answered): an owner's
invitation held the site's row ``FOR UPDATE`` and the site's audit chain head while it waited,
so every agent decision of the site (its rows reference the site; its audit record appends to
that chain) waited as long as the mail server did, and with no SMTP timeout that was forever.
Now the site is locked ``FOR NO KEY UPDATE`` (foreign-key checks pass), the email goes before
the record's append (the chain head is locked for the moment the append needs), and a send gives
up after ``SILL_EMAIL_TIMEOUT_SECONDS``.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
from django.db import connection, transaction

from audit.models import AuditRecord
from audit.services import append_record
from sill.accounts import invites, two_factor
from sill.accounts.models import MemberInvite, Role
from sill.orders.models import Customer
from tests.threads import run_while_an_append_commits

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

SMTP_WAIT = 4  # seconds the invitation waits on the silent SMTP server (EMAIL_TIMEOUT)


@pytest.fixture
def silent_smtp(settings):
    """An SMTP address whose kernel takes the connection and where nothing ever answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", listener.getsockname()[1]
        settings.EMAIL_TIMEOUT = SMTP_WAIT
        yield


def test_a_decision_does_not_wait_for_an_invitations_smtp_server(
    site, members, silent_smtp, needs_postgres
):
    owner = members["owner"]
    outcome: list[object] = []

    def invite() -> None:
        try:
            invites.create_invite(
                site=site,
                actor=owner,
                email="new@roasters.example",
                role=Role.STAFF,
                second_factor=two_factor.OPERATOR,
            )
        except OSError as exc:  # the silent server's timeout: nothing was saved
            outcome.append(exc)
        finally:
            connection.close()  # the thread's own connection

    inviting = threading.Thread(target=invite)
    inviting.start()
    time.sleep(1)  # the invitation is now inside its transaction, waiting on SMTP
    assert inviting.is_alive()

    started = time.monotonic()
    # What a decision writes: a row that references the site, and the site's audit record.
    with transaction.atomic():
        Customer.objects.create(site=site, email="buyer@example.com", name="Buyer")
        append_record(site=site, kind="member_change", body={"action": "probe"})
    took = time.monotonic() - started
    inviting.join(timeout=SMTP_WAIT + 10)

    assert took < 1.5, f"the decision's writes waited {took:.1f} s for the invitation"
    assert outcome and isinstance(outcome[0], OSError)  # the invitation gave up on SMTP
    assert not MemberInvite.objects.exists()  # and saved nothing


# Before: resending or revoking an invite locked it with its site joined (select_for_update()
# locks the site's row FOR UPDATE too, over the member change's FOR NO KEY UPDATE) until its
# record's append: an append of the site committing meanwhile (a refund's decision: it holds
# the chain head, and its commit share-locks the site's row for its foreign keys) deadlocked
# with it, and the owner's click answered a server error.
@pytest.mark.parametrize("change", ["resend", "revoke"])
def test_resending_or_revoking_an_invite_never_deadlocks_with_an_append_of_the_site(
    site, members, change, needs_postgres
):
    owner = members["owner"]
    invite = invites.create_invite(  # its record starts the site's chain
        site=site, actor=owner, email="new@roasters.example", role=Role.STAFF,
        second_factor=two_factor.OPERATOR,
    )  # fmt: skip

    def run() -> object:
        if change == "resend":
            return invites.resend_invite(
                invite=invite, actor=owner, second_factor=two_factor.OPERATOR
            )
        return invites.revoke_invite(invite=invite, actor=owner)

    done = run_while_an_append_commits(site_id=site.pk, run=run)

    assert isinstance(done, MemberInvite), done
    assert AuditRecord.objects.filter(site=site, kind="member_change").count() == 2
