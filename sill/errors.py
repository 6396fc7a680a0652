"""One domain error base with a stable code.

Views, the DRF exception handler and management commands all map a ``SillError`` to the
same ``{"error": {"code", "message", "field"}}`` shape (HTML views show ``message``).
"""

from __future__ import annotations


class SillError(Exception):
    """A refusal with a stable machine-readable ``code``.

    ``status`` is the HTTP status the API answers with; ``field`` names the offending input
    field (dotted path) when there is one.
    """

    code: str = "error"
    status: int = 400

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        field: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.field = field

    def as_dict(self) -> dict[str, dict[str, str | None]]:
        return {"error": {"code": self.code, "message": self.message, "field": self.field}}


class NotFound(SillError):
    code = "not_found"
    status = 404


class PermissionDenied(SillError):
    code = "forbidden"
    status = 403


class ExecutionInProgress(SillError):
    """A person's resolution of a refund or charge that needs attention, refused because an
    execution (a worker's attempt, the sweep's lookup at the rail) holds its lease now."""

    code = "execution_in_progress"
    status = 409
