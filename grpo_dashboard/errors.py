"""Error types shared by the spec, validation, store and backends."""

from __future__ import annotations

import reprlib
from dataclasses import dataclass
from typing import Any

MAX_VALUE_CHARS = 200
MAX_FIELD_CHARS = 120
MAX_LISTED_ERRORS = 20

_repr = reprlib.Repr()
_repr.maxlevel = 3
_repr.maxdict = 6
_repr.maxlist = _repr.maxtuple = _repr.maxset = _repr.maxfrozenset = _repr.maxdeque = 6
_repr.maxstring = 80
_repr.maxlong = 40
_repr.maxother = 80


def shorten(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, ending in "..." when cut."""
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."


def short_repr(value: Any, limit: int = MAX_VALUE_CHARS) -> str:
    """A repr of `value` of at most `limit` characters, computed without building the full repr of a huge value."""
    try:
        text = _repr.repr(value)
    except Exception:  # a value whose repr fails (e.g. an int past the digit limit) is still shown
        text = f"<{type(value).__name__} value>"
    return shorten(text, limit)


@dataclass(frozen=True)
class FieldError:
    """One problem with one field of a run spec: where, what value, what is allowed and the fix."""

    field: str
    value: Any
    message: str
    severity: str = "error"
    involves: tuple[str, ...] = ()  # every spec field the check that found it reads (the form marks them all)

    def __str__(self) -> str:
        return f"{shorten(self.field, MAX_FIELD_CHARS)} = {short_repr(self.value)}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (the value as a shortened repr, so a huge value never makes a huge payload)."""
        return {
            "field": shorten(self.field, MAX_FIELD_CHARS),
            "value": short_repr(self.value),
            "message": self.message,
            "severity": self.severity,
        }


class SpecError(ValueError):
    """A run spec that cannot be used; carries every field error found, not just the first.

    The message lists at most MAX_LISTED_ERRORS of them (each with a shortened value); `errors` keeps them all.
    """

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = list(errors)
        shown = self.errors[:MAX_LISTED_ERRORS]
        lines = "\n".join(f"  - {e}" for e in shown)
        if len(self.errors) > len(shown):
            lines += f"\n  ... and {len(self.errors) - len(shown)} more"
        plural = "s" if len(self.errors) != 1 else ""
        super().__init__(f"Invalid run spec ({len(self.errors)} problem{plural}):\n{lines}")


class RunNotFound(LookupError):
    """No run matches the given id, id prefix or name."""


class BackendError(RuntimeError):
    """A backend could not do what was asked (not logged in, no credits, unreachable); the message says the fix."""


class StoreError(RuntimeError):
    """The store cannot be read or written (read-only or full data directory, locked or damaged file)."""
