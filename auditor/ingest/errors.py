"""What a rejected import says: every error names the row, the field and the reason."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MAX_REPORTED_ERRORS", "ImportRejected", "IngestError", "RowError", "UploadTooLarge"]

MAX_REPORTED_ERRORS = 20
"""A rejected batch reports at most this many row errors (the first ones in file order)."""


MAX_REASON_LENGTH = 400
"""The longest reason a row error gives (longer ones are cut, ending with "...")."""
MAX_FIELD_LENGTH = 200


class IngestError(Exception):
    """A request that cannot be served as asked (unknown dataset, bad option...)."""


class UploadTooLarge(IngestError):
    """The upload decompresses to more than the service accepts (answered with 413)."""


@dataclass(frozen=True, order=True)
class RowError:
    """One invalid row. ``row`` counts data rows from 1 (a CSV header is not a row)."""

    row: int
    field: str | None
    reason: str

    def __post_init__(self) -> None:
        # A reason echoes the row's values, which a file may make megabytes long: keep every
        # message short enough to answer (and to travel in PostgreSQL's COPY failure message).
        if len(self.reason) > MAX_REASON_LENGTH:
            object.__setattr__(self, "reason", self.reason[:MAX_REASON_LENGTH - 3] + "...")
        if self.field is not None and len(self.field) > MAX_FIELD_LENGTH:
            object.__setattr__(self, "field", self.field[:MAX_FIELD_LENGTH - 3] + "...")

    def __str__(self) -> str:
        where = f"row {self.row}" if self.row > 0 else "file"
        return f"{where}, field {self.field!r}: {self.reason}" if self.field else f"{where}: {self.reason}"


class ImportRejected(IngestError):
    """The whole batch was rejected and nothing of it was written."""

    def __init__(self, errors: list[RowError], *, source: str | None = None, bad_rows: int | None = None):
        self.errors = sorted(errors)[:MAX_REPORTED_ERRORS]
        self.source = source
        #: How many rows of the batch are bad in all (the errors list only the first ones).
        self.bad_rows = bad_rows if bad_rows is not None else len({e.row for e in errors})
        head = f"{source}: " if source else ""
        more = (f" ({self.bad_rows} bad rows in all; the first errors are shown)"
                if self.bad_rows > len({e.row for e in self.errors}) else "")
        lines = "\n".join(f"  {e}" for e in self.errors)
        super().__init__(f"{head}batch rejected, nothing was written{more}:\n{lines}")
