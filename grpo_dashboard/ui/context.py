"""What every tab's handlers share: the store, the directory relative spec paths resolve against, the settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from grpo_dashboard.launch.backends import Backends, shared
from grpo_dashboard.launch.runs import Monitor
from grpo_dashboard.settings import Settings
from grpo_dashboard.store.db import Store


@dataclass
class UiContext:
    """Shared, read-mostly state of one app instance."""

    store: Store
    base_dir: Path
    monitor: Monitor | None = None
    settings: Settings = field(default_factory=Settings.from_env)  # Space or local, what is allowed
    backends: Backends = field(default_factory=shared)  # one instance of each backend, with its live state

    def monitor_problem(self) -> str | None:
        """Why active runs may not be updating (the ingestion thread's last error, or it not running)."""
        if self.monitor is None:
            return None
        if self.monitor.last_error:
            return f"Ingestion error (retrying every {self.monitor.interval_s:g} s): {self.monitor.last_error}"
        thread = getattr(self.monitor, "_thread", None)
        if thread is not None and not thread.is_alive():
            return "The ingestion thread has stopped: restart the app to follow active runs."
        return None
