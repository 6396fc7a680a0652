"""Celery tasks of the audit log: they only call services."""

from __future__ import annotations

from celery import shared_task

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


@shared_task(name="audit.verify_chain", acks_late=True)
def verify_chain_task(verification_id: int) -> str:
    """Activity's "Verify chain": the whole log of one site, with progress."""
    return run_verification(verification_id)
