"""The on-commit queue: services enqueue Celery tasks by name, never by importing them.

``refunds.tasks`` imports the services it calls, so a service that imported a task would close
an import circle. Enqueuing by name keeps the dependency one way; the task is looked up in the
Celery registry when the transaction commits (``refunds.apps`` imports ``refunds.tasks`` at
startup, so every process has it registered). The registry's task is used rather than
``send_task`` because ``send_task`` ignores ``task_always_eager``, which the tests rely on.
"""

from __future__ import annotations

from celery import current_app
from django.db import transaction


def enqueue_on_commit(task_name: str, *args: object) -> None:
    """Send ``task_name(*args)`` to the broker once the current transaction commits.

    Nothing is sent if it rolls back; outside a transaction it is sent at once (Django's
    ``on_commit`` semantics).
    """
    transaction.on_commit(lambda: current_app.tasks[task_name].delay(*args))
