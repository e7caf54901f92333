"""What every tab's handlers share: the store and the directory relative spec paths resolve against."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..store import Store


@dataclass
class UiContext:
    """Shared, read-mostly state of one app instance."""

    store: Store
    base_dir: Path
