"""``retry_on_conflict`` makes a decision whose rules were replaced again on the active ones."""

from __future__ import annotations

from typing import Any

import pytest

from policies.models import PolicyVersion
from policies.types import PolicyReplaced, ReadBefore
from refunds.locks import Busy, retry_on_conflict

UNREAD = object()


def test_a_version_read_before_the_decision_is_dropped_whatever_its_arguments_name():
    """Only an argument named ``policy_version`` used to be dropped: a decision given its
    pre-read rules under another name was made again, on the same replaced rules, until it
    answered 503 busy, never deciding on the rules now active."""
    seen: list[Any] = []

    @retry_on_conflict
    def decide(*, order: str, rules: Any = UNREAD) -> str:
        seen.append(rules)
        if isinstance(rules, ReadBefore):
            raise PolicyReplaced("v2 is active now")
        return order

    for version in (PolicyVersion(), None):  # None: the site ran the baseline
        seen.clear()
        stale = ReadBefore(version)
        assert decide(order="ord_1", rules=stale) == "ord_1"
        assert seen == [stale, UNREAD]


def test_a_decision_replaced_every_time_answers_busy():
    @retry_on_conflict
    def decide() -> None:
        raise PolicyReplaced("another version again")

    with pytest.raises(Busy):
        decide()
