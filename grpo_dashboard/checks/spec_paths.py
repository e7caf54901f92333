"""What several checks share about the names and paths a spec holds: Hub ids, reward names, and where a relative
path points."""

from __future__ import annotations

import re
from pathlib import Path

from grpo_dashboard.spec.paths import user_path

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
REWARD_NAME = re.compile(r"^[A-Za-z_][\w.-]*$")


def resolve(base: Path, value: str) -> Path:
    """`value` as a path: `~` expanded, and a relative one taken against `base`."""
    p = user_path(value)
    return p if p.is_absolute() else base / p


def looks_like_path(value: str) -> bool:
    """True for a value meant as a file system path rather than a Hub id (./x, /x, ~/x, a/b/c, a\\b)."""
    return value.startswith((".", "/", "~")) or value.count("/") > 1 or "\\" in value
