"""The on-commit queue: services enqueue Celery tasks by name, never by importing them.

A tasks module imports the services it calls (``refunds.tasks``, ``sill.orders.tasks``), so a
service that imported a task would close an import circle. Enqueuing by name keeps the
dependency one way; the task is looked up in the Celery registry when the transaction commits
(each app's ``ready()`` imports its tasks module, so every process has them registered). The
registry's task is used rather than ``send_task`` because ``send_task`` ignores
``task_always_eager``, which the tests rely on. Here in the foundation so that ``sill/`` and
the apps above it share it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from celery import current_app
from django.db import transaction


def enqueue_on_commit(task_name: str, *args: object, shown: Sequence[object] = ()) -> None:
    """Send ``task_name(*args)`` to the broker once the current transaction commits.

    Nothing is sent if it rolls back; outside a transaction it is sent at once (Django's
    ``on_commit`` semantics).

    What the message's headers show of the arguments (Celery's ``argsrepr``: monitoring, and
    the worker's failure log records) is ``args``, or ``shown`` in their place when one of
    them is a secret (a capability URL, say): the arguments themselves travel in the body.
    """
    argsrepr = repr(tuple(shown or args))

    def send() -> None:
        # Any: celery-types' apply_async lacks Celery's documented argsrepr/kwargsrepr.
        task: Any = current_app.tasks[task_name]
        task.apply_async(args, argsrepr=argsrepr, kwargsrepr="{}")

    transaction.on_commit(send)
