"""The Celery app. Broker: Redis when REDIS_URL is set, else the embedded filesystem broker."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sill.settings")

app = Celery("sill")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
