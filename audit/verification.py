"""Verifying a site's whole log in the background: Activity's "Verify chain".

:func:`start_verification` records the request and enqueues ``audit.verify_chain`` on commit;
the worker runs :func:`run_verification`, which writes progress every 1,000 records and the
result (:func:`audit.selectors.chain_verification`: chain, signatures, key windows, the
columns kept beside each record, chain head, stored tree nodes, latest checkpoint). A page
request never verifies the chain itself. One check per site runs at a time: asking again while
one runs answers that one. A check that raises instead of answering ends as failed, saying so,
rather than showing "running" until it goes stale; one whose worker died (nothing answers
within :data:`STALE_AFTER`) reads as failed on the page and is ended as failed in the database
when a new check is asked for.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from celery import current_app
from django.db import transaction
from django.db.models.functions import Coalesce
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerUnreachable

from audit.models import CHECK_LOST, CHECK_NOT_STARTED, AuditChainHead, AuditVerification
from audit.selectors import chain_verification
from sill.accounts.models import Site

log = logging.getLogger(__name__)

# A running check that wrote no progress for this long is taken as lost (its worker died): it
# ends as failed and a new one may start. Progress comes every 1,000 records (under a second);
# how long a check runs in all depends on the log's size, and says nothing.
STALE_AFTER = timedelta(minutes=15)
LOST = CHECK_LOST
NOT_STARTED = CHECK_NOT_STARTED


def _last_sign_of_life() -> Coalesce:
    return Coalesce("progress_at", "started_at")


def _end_lost(site: Site, now: Any) -> None:
    """End ``site``'s running checks silent for more than :data:`STALE_AFTER` before ``now``."""
    AuditVerification.objects.annotate(alive_at=_last_sign_of_life()).filter(
        site=site, status=AuditVerification.Status.RUNNING, alive_at__lte=now - STALE_AFTER
    ).update(status=AuditVerification.Status.FAILED, problem=LOST, finished_at=now)


def start_verification(*, site: Site, actor: Any) -> AuditVerification:
    now = timezone.now()
    with transaction.atomic():
        # The site's row, locked: two requests at once find no running check to lock, so
        # without it both would start one.
        # FOR NO KEY UPDATE: decisions' foreign-key checks on the site never wait for it.
        Site.objects.select_for_update(no_key=True).filter(pk=site.pk).first()
        _end_lost(site, now)
        running = AuditVerification.objects.filter(
            site=site, status=AuditVerification.Status.RUNNING
        ).first()
        if running is not None:
            return running
        total = AuditChainHead.objects.filter(site=site).values_list("last_seq", flat=True).first()
        verification = AuditVerification.objects.create(
            site=site,
            requested_by=actor.get_username() if getattr(actor, "pk", None) else "",
            total=total or 0,
            started_at=now,
        )
        transaction.on_commit(lambda: _send(verification))
    return verification


def _send(verification: AuditVerification) -> None:
    """Enqueue the check; a broker that cannot be reached ends it at once as failed, saying so
    (:data:`NOT_STARTED`), rather than a 500 after the commit and a check that reads "running"
    for :data:`STALE_AFTER`, keeping any other from starting."""
    try:
        # By name: audit.tasks imports this module (registered by audit.apps at startup).
        current_app.tasks["audit.verify_chain"].delay(verification.pk)
    except BrokerUnreachable as exc:
        now = timezone.now()
        AuditVerification.objects.filter(
            pk=verification.pk, status=AuditVerification.Status.RUNNING
        ).update(status=AuditVerification.Status.FAILED, problem=NOT_STARTED, finished_at=now)
        verification.status, verification.problem = AuditVerification.Status.FAILED, NOT_STARTED
        verification.finished_at = now
        log.warning(
            "audit chain check %s of site %s not started: the broker cannot be reached (%s)",
            verification.pk, verification.site_id, type(exc).__name__,
        )  # fmt: skip


def run_verification(verification_id: int) -> str:
    verification = (
        AuditVerification.objects.select_related("site").filter(pk=verification_id).first()
    )
    if verification is None or verification.status != AuditVerification.Status.RUNNING:
        return "nothing to do"
    # Every write is to the check while it still runs: one ended as lost meanwhile (silent for
    # STALE_AFTER, then a new check was asked for) keeps that end, and the check that replaced
    # it is the one the page shows. A late result is only logged.
    still_running = AuditVerification.objects.filter(
        pk=verification_id, status=AuditVerification.Status.RUNNING
    )

    def progress(checked: int) -> None:
        still_running.update(checked=checked, progress_at=timezone.now())

    if not still_running.update(progress_at=timezone.now(), checked=0):
        return "ended as lost"

    try:
        result = chain_verification(verification.site, progress=progress)
    except Exception as exc:
        # Whatever the log holds must end the check with an answer: a tampered log that
        # crashes the verifier is still a log nobody can vouch for.
        log.exception("audit chain verification of site %s raised", verification.site_id)
        still_running.update(
            status=AuditVerification.Status.FAILED,
            # The page shows this to the site's members: the details stay in the worker's log.
            problem=f"the check could not finish ({type(exc).__name__}); see the worker's log",
            finished_at=timezone.now(),
        )
        return "failed"
    if not result.ok:
        log.warning(
            "audit chain of site %s broken at seq %s: %s",
            verification.site_id, result.first_bad_seq, result.problem,
        )  # fmt: skip
    ended = still_running.update(
        status=AuditVerification.Status.OK if result.ok else AuditVerification.Status.FAILED,
        checked=result.count,
        first_bad_seq=result.first_bad_seq,
        problem=result.problem,
        finished_at=timezone.now(),
    )
    if not ended:
        log.warning(
            "audit chain check %s of site %s finished (%s) after it was ended as lost",
            verification_id, verification.site_id, "ok" if result.ok else "failed",
        )  # fmt: skip
        return "ended as lost"
    return "ok" if result.ok else "failed"


def latest_verification(site: Site) -> AuditVerification | None:
    """The site's latest check; one whose worker died reads as failed (a page's GET writes
    nothing: :func:`start_verification` ends it in the database)."""
    found = AuditVerification.objects.filter(site=site).order_by("-started_at").first()
    now = timezone.now()
    alive_at = (found.progress_at or found.started_at) if found is not None else None
    if (
        found is not None
        and alive_at is not None
        and found.status == AuditVerification.Status.RUNNING
        and alive_at <= now - STALE_AFTER
    ):
        found.status, found.problem = AuditVerification.Status.FAILED, LOST
        found.finished_at = alive_at + STALE_AFTER
    return found
