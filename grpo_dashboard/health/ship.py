"""Ship this package to a training job as ``grpo_health``, so the job's guard and alerts run the very same rules.

The job script imports nothing from ``grpo_dashboard`` (it runs where only its own files are delivered), and this
package needs only numpy and the standard library. So the launcher copies the package's modules next to the run's
``run.yaml`` as ``grpo_health/`` (``ship``); a remote backend uploads the same files (``package_files``). The job
puts the directory of its ``run.yaml`` on ``sys.path`` and imports ``grpo_health``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
SHIPPED_NAME = "grpo_health"


def package_files(prefix: str = SHIPPED_NAME) -> dict[str, Path]:
    """The package's modules by their path in the job's directory, e.g. ``{"grpo_health/rules.py": Path}``."""
    return {f"{prefix}/{p.name}": p for p in sorted(PACKAGE_DIR.glob("*.py"))}


def ship(dest_dir: str | Path) -> Path:
    """Copy the package into ``dest_dir/grpo_health`` (replacing an older copy) and return that directory."""
    dest = Path(dest_dir) / SHIPPED_NAME
    tmp = Path(dest_dir) / f".{SHIPPED_NAME}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name, src in package_files().items():
        shutil.copy2(src, tmp / name.split("/", 1)[1])
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest
