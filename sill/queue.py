"""The on-commit queue: services enqueue Celery tasks by name, never by importing them.

A tasks module imports the services it calls (``refunds.tasks``, ``sill.orders.tasks``), so a
service that imported a task would close an import circle. Enqueuing by name keeps the
dependency one way; the task is looked up in the Celery registry when the transaction commits
(each app's ``ready()`` imports its tasks module, so every process has them registered). The
registry's task is used rather than ``send_task`` because ``send_task`` ignores
``task_always_eager``, which the tests rely on. Here in the foundation so that ``sill/`` and
the apps above it share it.

A broker that cannot be reached: the message is sent after the commit, so what the
transaction wrote is kept either way. Where a beat task finds that work again from the
database (``recovered_by``: a processing refund no execution holds, a stored webhook event
not yet processed, a pending charge), the failed send is logged and the request goes on with
its answer: an agent is told the decision Sill made and stored, not a 500 for it, and does
not retry a refund that is already on its way. Elsewhere (nothing would ever send it) the
error is raised, as Celery raises it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from celery import current_app
from django.db import transaction
from kombu.exceptions import OperationalError as BrokerUnreachable

logger = logging.getLogger(__name__)


def enqueue_on_commit(
    task_name: str,
    *args: object,
    shown: Sequence[object] = (),
    recovered_by: str | None = None,
) -> None:
    """Send ``task_name(*args)`` to the broker once the current transaction commits.

    Nothing is sent if it rolls back; outside a transaction it is sent at once (Django's
    ``on_commit`` semantics).

    What the message's headers show of the arguments (Celery's ``argsrepr``: monitoring, and
    the worker's failure log records) is ``args``, or ``shown`` in their place when one of
    them is a secret (a capability URL, say): the arguments themselves travel in the body.

    ``recovered_by`` names the beat task that sends this work again when the message never
    arrives: with it, a broker that cannot be reached (after Celery's own publish retries) is
    logged, naming the task, what the message shows and that beat task, and not raised.
    """
    argsrepr = repr(tuple(shown or args))

    def send() -> None:
        # Any: celery-types' apply_async lacks Celery's documented argsrepr/kwargsrepr.
        task: Any = current_app.tasks[task_name]
        try:
            task.apply_async(args, argsrepr=argsrepr, kwargsrepr="{}")
        except BrokerUnreachable as exc:
            if recovered_by is None:
                raise
            # The class only: a broker's error can carry its address.
            logger.warning(
                "%s%s not sent: the broker cannot be reached (%s); %s sends it",
                task_name,
                argsrepr,
                type(exc).__name__,
                recovered_by,
            )

    transaction.on_commit(send)
