"""Beat's schedules in the Django admin: shown, never changed there.

The rows of django-celery-beat are the ticks of Sill's sweeps (checkpoint signing,
reconciliation, naming Stripe accounts, held-refund expiry, recovery…), written by migrations;
how often each sweep does its work is configuration (``SILL_AUDIT_CHECKPOINT_MINUTES``,
``SILL_RECONCILE_EVERY_MINUTES``). A superuser who switched one off, re-timed it or pointed
it at another task would change every site's guarantees with no site's log saying so. So the
admin lists them and refuses every add, change and delete, and of django-celery-beat's list
actions keeps only "Run selected tasks" (a sweep run early changes nothing stored); its
enable, disable and toggle actions write with ``QuerySet.update`` past any permission check.
An operator who must stop a sweep stops beat, where the host's own records see it.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django_celery_beat import admin as beat_admin
from django_celery_beat.models import (
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
    SolarSchedule,
)


class _ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class PeriodicTaskAdmin(_ReadOnly, beat_admin.PeriodicTaskAdmin):
    actions = ("run_tasks",)


class ClockedScheduleAdmin(_ReadOnly, beat_admin.ClockedScheduleAdmin):
    pass


class CrontabScheduleAdmin(_ReadOnly, beat_admin.CrontabScheduleAdmin):
    pass


class SolarScheduleAdmin(_ReadOnly, beat_admin.SolarScheduleAdmin):
    pass


class IntervalScheduleAdmin(_ReadOnly, beat_admin.IntervalScheduleAdmin):
    pass


def register_read_only(site: admin.AdminSite) -> None:
    """Replace django-celery-beat's registrations on ``site`` (after autodiscovery)."""
    for model, model_admin in (
        (PeriodicTask, PeriodicTaskAdmin),
        (ClockedSchedule, ClockedScheduleAdmin),
        (CrontabSchedule, CrontabScheduleAdmin),
        (SolarSchedule, SolarScheduleAdmin),
        (IntervalSchedule, IntervalScheduleAdmin),
    ):
        if site.is_registered(model):
            site.unregister(model)
        site.register(model, model_admin)
