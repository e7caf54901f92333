"""User-given paths: `~` expanded where it names a user, the text kept as it is where it does not."""

from __future__ import annotations

from pathlib import Path


def user_path(value: str | Path) -> Path:
    """`value` as a Path with `~` / `~user` expanded; a `~name` of no known user stays literal (a relative path that
    validation then reports as missing) instead of raising RuntimeError."""
    p = Path(value)
    try:
        return p.expanduser()
    except RuntimeError:
        return p
