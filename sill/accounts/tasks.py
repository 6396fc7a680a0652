from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from sill.accounts.models import WorkerHeartbeat


@shared_task(name="sill.heartbeat", ignore_result=True)
def record_heartbeat_task(hostname: str | None = None) -> None:
    """Record that a worker is alive; scheduled every minute by beat (see migrations)."""
    name = hostname or record_heartbeat_task.request.hostname or "eager"
    WorkerHeartbeat.objects.update_or_create(hostname=name, defaults={"seen_at": timezone.now()})
