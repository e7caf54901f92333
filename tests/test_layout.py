"""The package's layout holds: stage folders import downstream only, gradio stays in ui/, few modules at the root.

The contracts live in pyproject.toml ([tool.importlinter]); `lint-imports` checks them on the real tree, and once
on a copy with one upward import added, and once with an import cycle inside a folder hidden in a function, to show
the checks catch them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from .conftest import REPO

ROOT_MODULES = {"__init__.py", "__main__.py", "cli.py", "errors.py", "redaction.py", "settings.py"}
STAGES = {"spec", "checks", "store", "launch", "integrations", "health", "views", "space", "ui"}


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """Run import-linter on the package under `root` with the project's contracts."""
    tool = Path(sys.executable).parent / "lint-imports"
    cmd = [str(tool)] if tool.exists() else [sys.executable, "-m", "importlinter.cli"]
    return subprocess.run(
        [*cmd, "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )


def test_the_import_contracts_hold() -> None:
    out = lint_imports(REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "5 kept, 0 broken" in out.stdout


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    shutil.copytree(REPO / "grpo_dashboard", tmp_path / "grpo_dashboard", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    db = tmp_path / "grpo_dashboard" / "store" / "db.py"
    upward = "\n\ndef _upward() -> None:\n    from grpo_dashboard.views import overview  # noqa\n"
    db.write_text(db.read_text() + upward)
    out = lint_imports(tmp_path)
    assert out.returncode != 0
    assert "grpo_dashboard.store.db -> grpo_dashboard.views.overview" in out.stdout


def test_launch_code_in_a_backends_options_breaks_the_contract(tmp_path: Path) -> None:
    """The spec imports launch/kinds.py and the options (the one exception to the layers): they must stay light."""
    shutil.copytree(REPO / "grpo_dashboard", tmp_path / "grpo_dashboard", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    options = tmp_path / "grpo_dashboard" / "launch" / "slurm" / "options.py"
    heavy = "\n\ndef _heavy() -> None:\n    from grpo_dashboard.launch.slurm import script  # noqa\n"
    options.write_text(options.read_text() + heavy)
    out = lint_imports(tmp_path)
    assert out.returncode != 0
    assert "The kinds table and the backends' options import nothing of ours but errors BROKEN" in out.stdout


def test_a_cycle_inside_a_folder_breaks_the_contract(tmp_path: Path) -> None:
    shutil.copytree(REPO / "grpo_dashboard", tmp_path / "grpo_dashboard", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    memo = tmp_path / "grpo_dashboard" / "views" / "memo.py"  # overview imports memo
    hidden = "\n\ndef _back() -> None:\n    from grpo_dashboard.views import overview  # noqa\n"
    memo.write_text(memo.read_text() + hidden)
    out = lint_imports(tmp_path)
    assert out.returncode != 0
    assert "No cycles are allowed in grpo_dashboard.views" in out.stdout


def test_the_root_holds_only_the_entry_points_and_shared_basics() -> None:
    package = REPO / "grpo_dashboard"
    assert {p.name for p in package.glob("*.py")} == ROOT_MODULES
    assert {p.name for p in package.iterdir() if p.is_dir() and any(p.glob("*.py"))} == STAGES
