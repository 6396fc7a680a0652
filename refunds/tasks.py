"""Celery tasks: they only call services. Enqueued on commit by name (``sill.queue``)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from celery import Task, shared_task
from celery.utils.time import get_exponential_backoff_interval
from django.conf import settings
from django.db import OperationalError

from refunds.confirmations import send_confirmation, send_missed_confirmations
from refunds.execution import RetryLater, execute_refund, stuck_refund_ids
from refunds.reconcile.attention import (
    attention_refund_ids_due,
    check_refund_at_rail,
    notify_attention,
    notify_missed_attention,
)
from refunds.reconcile.inbox import catch_up_reported_charge
from refunds.reconcile.rail_reports import notify_missed_reversals, notify_reversed
from refunds.reconcile.runs import accounts_due, run_reconciliation
from refunds.review.decisions import expire_held_refunds
from refunds.review.failures import notify_failed, notify_missed_failures
from refunds.review.notifications import notify_held_refund, notify_pending_held_refunds
from refunds.review.slack import Click, decide_click, give_up_click, respond, shown_click
from refunds.review.slack_link_checks import check_slack_links
from sill.rails.base import RetryableRailError

logger = logging.getLogger(__name__)


@shared_task(bind=True, name="refunds.execute", max_retries=None, acks_late=True)
def execute_refund_task(self: Task[[str], str], refund_id: str) -> str:
    """One attempt; a retry is the same refund with the same key, after a jittered backoff.

    The attempt and time limits live in ``execute_refund`` (the refund's own counters), so a
    redelivered or re-enqueued task counts against the same budget; past them the refund
    needs attention instead of being retried.
    """
    try:
        return execute_refund(refund_id)
    except RetryLater as exc:
        raise self.retry(exc=exc, countdown=exc.countdown) from exc


@shared_task(name="refunds.recover_stuck")
def recover_stuck_refunds_task() -> int:
    """Re-enqueue processing refunds whose execution died (lease lapsed). Beat: every minute."""
    older = timedelta(seconds=int(getattr(settings, "SILL_RECOVER_AFTER_SECONDS", 60)))
    ids = stuck_refund_ids(older_than=older)
    for refund_id in ids:
        execute_refund_task.delay(refund_id)
    return len(ids)


@shared_task(name="refunds.check_at_rail", acks_late=True)
def check_refund_at_rail_task(refund_id: str) -> str:
    """Ask the rail about one refund that needs attention."""
    return check_refund_at_rail(refund_id)


@shared_task(name="refunds.check_attention")
def check_attention_refunds_task() -> int:
    """Enqueue a rail lookup for each refund needing attention that is due, and email the
    owners and admins of any the on-commit notification missed. Beat: every minute."""
    ids = attention_refund_ids_due()
    for refund_id in ids:
        check_refund_at_rail_task.delay(refund_id)
    # SMTP down (an OSError): the claims were given back, the next minute tries again. A
    # refused email does not get here: it skips its refund and the others are told. Only the
    # error's class is logged: an SMTP error's text can carry the server's reply and addresses.
    try:
        notify_missed_attention()
    except OSError as exc:
        logger.warning("refund attention emails not sent: mail is failing (%s)", type(exc).__name__)
    return len(ids)


@shared_task(
    name="refunds.notify_attention",
    ignore_result=True,
    autoretry_for=(OSError,),  # SMTP errors are OSErrors; the marker was given back
    max_retries=5,
    retry_backoff=30,
)
def notify_attention_task(refund_id: str) -> None:
    """Email the site's owners and admins, once, that a refund needs attention."""
    notify_attention(refund_id=refund_id)


@shared_task(
    name="refunds.send_confirmation",
    ignore_result=True,
    autoretry_for=(OSError,),  # SMTP down; the claim was given back (a refusal is not raised)
    max_retries=5,
    retry_backoff=30,
)
def send_refund_confirmation_task(refund_id: str) -> None:
    """Tell the buyer, once, that their refund went through (a credit's customer, that it was
    credited). A mail server that is down is tried again, a few times, with a backoff; one that
    refuses the message is left to the sweep (``refunds.notify_missed_outcomes``), later."""
    send_confirmation(refund_id=refund_id)


@shared_task(name="refunds.expire_held")
def expire_held_refunds_task() -> int:
    """Expire held refunds nobody decided within 24 hours. Beat: every minute."""
    return expire_held_refunds()


@shared_task(
    name="refunds.notify_held",
    ignore_result=True,
    autoretry_for=(OSError,),  # SMTP errors are OSErrors; the marker was given back
    max_retries=5,
    retry_backoff=30,
)
def notify_held_refund_task(refund_id: str) -> None:
    """Email the site's owners and admins (and Slack) about one held refund, once."""
    notify_held_refund(refund_id=refund_id)


@shared_task(name="refunds.notify_pending_held")
def notify_pending_held_refunds_task() -> int:
    """Notify held refunds the on-commit notification missed. Beat: every minute."""
    # SMTP down (an OSError): the claim was given back, the next minute tries again. A refused
    # email does not get here: it skips its refund and the others are told. Only the error's
    # class is logged: an SMTP error's text can carry the server's reply and addresses.
    try:
        return notify_pending_held_refunds()
    except OSError as exc:
        logger.warning("held refund emails not sent: mail is failing (%s)", type(exc).__name__)
        return 0


@shared_task(
    name="refunds.notify_failed",
    ignore_result=True,
    autoretry_for=(OSError,),  # SMTP errors are OSErrors; the claim was given back
    max_retries=5,
    retry_backoff=30,
)
def notify_failed_task(refund_id: str) -> None:
    """Email the site's owners and admins, once, that a refund failed (enqueued on commit; the
    sweep ``refunds.notify_missed_outcomes`` sends one this task missed)."""
    notify_failed(refund_id=refund_id)


@shared_task(name="refunds.slack_respond", acks_late=True)
def slack_respond_task(response_url: str, text: str, privately: bool = False) -> bool:
    """Replace a clicked Slack message with the decision's outcome, or tell the clicker alone
    why Sill refused the click (enqueued on commit)."""
    return respond(response_url=response_url, text=text, privately=privately)


# Tasks are acknowledged late by default (CELERY_TASK_ACKS_LATE); a click is not (below).
@shared_task(bind=True, name="refunds.slack_decide", acks_late=False, max_retries=7)
def slack_decide_task(
    self: Task[[str, str, str, str, str, list[str] | None], str],
    site_id: str,
    action: str,
    refund_id: str,
    slack_user_id: str,
    response_url: str,
    teams: list[str] | None = None,
) -> str:
    """Decide an Approve / Reject click from Slack, verified and queued by the interactivity
    endpoint (enqueued on commit). Acknowledged on receipt, not after: a click is a person's
    decision, and a worker lost mid-way must not make it twice; the buttons stay for another
    click. Returns the refund's status afterwards, or "refused".

    A database error (a lost connection, a lock timeout) rolled the attempt back, or came
    after its decision committed: the click is tried again after a jittered backoff (seven
    times, up to about two minutes in all; a response_url works for half an hour), and a retry
    never decides twice (``decide_click``'s ``retried``). After the last, the clicker is told
    the click was not recorded, and it is logged at ERROR (``give_up_click``)."""
    # ``teams``: the Slack workspace and organisation ids the click came from. A click queued
    # before Sill read them has none, and decides nothing (its clicker is told to click
    # again; the buttons stay).
    click = Click(
        action=action, refund_id=refund_id, slack_user_id=slack_user_id,
        response_url=response_url, teams=tuple(teams or ()),
    )  # fmt: skip
    try:
        decided = decide_click(site_id=site_id, click=click, retried=self.request.retries > 0)
    except OperationalError as exc:
        if self.request.retries >= (self.max_retries or 0):
            # The last attempt: Celery would raise the error and the click be lost unseen,
            # its clicker waiting for an outcome that never comes.
            give_up_click(
                site_id=site_id, click=click, attempts=self.request.retries + 1, error=exc
            )
            return "not recorded"
        backoff = get_exponential_backoff_interval(
            factor=1, retries=self.request.retries, maximum=60, full_jitter=True
        )
        # Celery's retry shows the arguments in the new message's headers unless told what to
        # show: the response_url stays out of them, as it did in the first message's. (Any:
        # celery-types' retry lacks the apply_async options it passes on.)
        retry: Any = self.retry
        raise retry(
            exc=exc,
            countdown=backoff,
            argsrepr=repr(shown_click(site_id, click)),
            kwargsrepr="{}",
        ) from exc
    return "refused" if decided is None else str(decided.status)


@shared_task(name="refunds.slack_check_links")
def slack_check_links_task() -> dict[str, int]:
    """Ask Slack about the Slack links it has not confirmed (made before Sill asked), and
    again about confirmed ones a day on: confirm, clear or unconfirm each, or leave it for the
    next run when Slack does not say. Beat: every 15 minutes."""
    check = check_slack_links()
    return {
        "confirmed": check.confirmed,
        "cleared": check.cleared,
        "unconfirmed": check.unconfirmed,
        "rechecked": check.rechecked,
        "revoked": check.revoked,
    }


@shared_task(
    name="refunds.notify_reversed",
    autoretry_for=(OSError,),  # SMTP errors are OSErrors; the claim was given back
    max_retries=5,
    retry_backoff=30,
)
def notify_reversed_task(refund_id: str) -> bool:
    """Tell owners and admins that a settled refund failed at the rail (enqueued on commit; the
    sweep ``refunds.notify_missed_outcomes`` sends one this task missed)."""
    return notify_reversed(refund_id=refund_id)


@shared_task(name="refunds.notify_missed_outcomes")
def notify_missed_outcomes_task() -> int:
    """Send the failure, failed-after-settlement and buyer's confirmation emails their
    on-commit task missed (its message lost, its retries used up, or refused and now due
    again); how many were sent. Beat: every minute."""
    # SMTP down (an OSError): the claim was given back, the next minute tries again. A refused
    # email does not get here: it skips its refund and the others are sent. Only the error's
    # class is logged: an SMTP error's text can carry the server's reply and addresses.
    try:
        return notify_missed_failures() + notify_missed_reversals() + send_missed_confirmations()
    except OSError as exc:
        logger.warning("refund outcome emails not sent: mail is failing (%s)", type(exc).__name__)
        return 0


@shared_task(
    name="refunds.catch_up_charge",
    acks_late=True,
    autoretry_for=(RetryableRailError, OperationalError),
    retry_backoff=True,
    max_retries=8,
)
def catch_up_charge_task(charge_id: str, event_id: str) -> str:
    """A rail event said the charge has refunds Sill has not recorded, without naming them:
    the charge is read from the rail and reconciled (a redelivery finds the books in order);
    a rail that does not answer is asked again, backing off."""
    return catch_up_reported_charge(charge_id=charge_id, event_id=event_id)


@shared_task(name="refunds.reconcile")
def reconcile_task() -> int:
    """Start a reconciliation run for each rail account that is due. Beat: every 5 minutes."""
    ids = accounts_due()
    for account_id in ids:
        reconcile_account_task.delay(account_id)
    return len(ids)


@shared_task(name="refunds.reconcile_account", acks_late=True)
def reconcile_account_task(account_id: int) -> str:
    """One rail account's run (a redelivery within the interval finds it claimed)."""
    run = run_reconciliation(account_id=account_id)
    if run is None:
        return "not due"
    credits = f", credits of {run.customers_checked} customers" if run.customers_checked else ""
    return (
        f"{run.charges_checked} checked{credits}, {run.items_opened} opened, "
        f"{run.items_cleared} cleared"
    )
