"""Error types shared by the spec, validation, store and backends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FieldError:
    """One problem with one field of a run spec: where, what value, what is allowed and the fix."""

    field: str
    value: Any
    message: str
    severity: str = "error"

    def __str__(self) -> str:
        return f"{self.field} = {self.value!r}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (the value is shown as its repr)."""
        return {"field": self.field, "value": repr(self.value), "message": self.message, "severity": self.severity}


class SpecError(ValueError):
    """A run spec that cannot be used; carries every field error found, not just the first."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = list(errors)
        lines = "\n".join(f"  - {e}" for e in self.errors)
        plural = "s" if len(self.errors) != 1 else ""
        super().__init__(f"Invalid run spec ({len(self.errors)} problem{plural}):\n{lines}")


class RunNotFound(LookupError):
    """No run matches the given id, id prefix or name."""


class BackendError(RuntimeError):
    """A backend could not do what was asked (not logged in, no credits, unreachable); the message says the fix."""


class StoreError(RuntimeError):
    """The store cannot be read or written (read-only or full data directory, locked or damaged file)."""
