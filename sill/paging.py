"""Pages of a list whose work does not grow with the table (issue 18: bounded list pages).

:class:`BoundedPaginator` is Django's ``Paginator`` with two changes:

- its ``count`` stops at ``cap`` rows (``SELECT COUNT(*) FROM (… LIMIT cap + 1)``), so the
  pager's count costs at most ``cap`` index entries however large the table grows; past the
  cap, ``more`` is true, the pages reach the first ``cap`` rows and the template says so
  ("10,000+"; narrow the filters to reach older rows). Deep pages are an ``OFFSET`` of at most
  ``cap`` rows for the same reason.
- ``rows`` (optional) turns the page's slice into the rows shown: a list pages over plain
  ids, then reads or annotates only that page's rows (per-page aggregates for 25 rows,
  never a subquery or ``GROUP BY`` evaluated over every row of the table).

Page numbers, ``?page=`` links and ``get_page``'s forgiving parsing are Django's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import QuerySet

COUNT_CAP = 10_000


class BoundedPaginator(Paginator):
    def __init__(
        self,
        object_list: QuerySet[Any],
        per_page: int,
        *,
        cap: int = COUNT_CAP,
        rows: Callable[[list[Any]], Sequence[Any]] | None = None,
    ) -> None:
        super().__init__(object_list, per_page)
        self.queryset = object_list
        self.cap = cap
        self.rows = rows

    @cached_property
    def _counted(self) -> int:
        # Ordering does not change how many rows there are: dropping it lets the database
        # stop after cap + 1 rows of whichever index it scans.
        return int(self.queryset.order_by()[: self.cap + 1].count())

    @cached_property
    def count(self) -> int:
        """The rows, up to ``cap`` (see ``more``)."""
        return min(self._counted, self.cap)

    @property
    def more(self) -> bool:
        """Whether rows lie past the cap (the count reads "``cap``+")."""
        return self._counted > self.cap

    def page(self, number: int | str) -> Page:
        page = super().page(number)
        if self.rows is not None:
            page.object_list = self.rows(list(page.object_list))
        return page
