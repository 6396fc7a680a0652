"""The Celery app, configured from the CELERY_* settings.

Broker: SILL_BROKER_URL, else Redis at REDIS_URL, else the embedded filesystem broker. What
each does with a killed worker's task: README "Workers, brokers and redelivery".
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator, Mapping
from functools import cached_property
from typing import Any

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sill.settings")


class DjangoCelerySettings(Mapping[str, Any]):
    """Django's ``CELERY_*`` settings, read once, when Celery first needs its configuration.

    Celery looks a setting up under several keys on every publish (seven settings for one
    ``delay()``), and through ``django.conf.settings`` each miss raises and catches an
    AttributeError: about a fifth of an enqueue's CPU (issue 18). A dict answers a miss with
    a KeyError from C. Settings are fixed once a process has started; what tests change at
    run time they change on ``app.conf``, which is layered above this.
    """

    @cached_property
    def _values(self) -> dict[str, Any]:
        from django.conf import settings

        names = [name for name in dir(settings) if name.startswith("CELERY_")]
        return {name: getattr(settings, name) for name in names}

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


app = Celery("sill")
app.config_from_object(DjangoCelerySettings(), namespace="CELERY")
app.autodiscover_tasks()


@signals.worker_init.connect
def freeze_loaded(**_kwargs: Any) -> None:
    """In a worker's main process, once the task modules are imported and before the pool's
    processes are forked: what loading made is moved out of the garbage collector's sight
    (``gc.freeze()``, as the web workers do, ``sill/wsgi.py``), so the forked processes'
    collections walk only what tasks make, not every module of Django and Sill (tens of ms
    each), and leave the pages they share with the main process unwritten."""
    gc.collect()
    gc.freeze()
