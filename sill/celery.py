"""The Celery app, configured from the CELERY_* settings.

Broker: SILL_BROKER_URL, else Redis at REDIS_URL, else the embedded filesystem broker. What
each does with a killed worker's task: README "Workers, brokers and redelivery".
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sill.settings")

app = Celery("sill")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
