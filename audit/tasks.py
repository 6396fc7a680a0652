"""Celery tasks of the audit log: they only call services."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from audit.checkpoints import publish_checkpoint, publish_pending, write_due_checkpoints
from audit.verification import run_verification


@shared_task(name="audit.write_checkpoints")
def write_checkpoints_task() -> int:
    """Beat, every minute: sign the checkpoints that are due, retry unpublished ones."""
    written = write_due_checkpoints()
    publish_pending()
    return written


@shared_task(name="audit.publish_checkpoint", acks_late=True)
def publish_checkpoint_task(checkpoint_id: int) -> bool:
    return publish_checkpoint(checkpoint_id)


# A check's time grows with the log (a few million records take longer than the project's
# task limits, which exist to end hung rail calls): it gets limits of its own. Acknowledged
# when it starts: a check running past the broker's visibility timeout must not be delivered
# to a second worker; one whose worker died is seen as lost (no progress) and asked again.
VERIFY_SOFT_LIMIT_SECONDS = settings.SILL_AUDIT_VERIFY_MAX_SECONDS


@shared_task(
    name="audit.verify_chain",
    acks_late=False,
    soft_time_limit=VERIFY_SOFT_LIMIT_SECONDS,
    time_limit=VERIFY_SOFT_LIMIT_SECONDS + 60,
)
def verify_chain_task(verification_id: int) -> str:
    """Activity's "Verify chain": the whole log of one site, with progress."""
    return run_verification(verification_id)
