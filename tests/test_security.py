"""Security guarantees that do not need a run: names cannot escape the data directory, nothing goes through a shell."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from grpo_dashboard.launch.runs import make_run_id, resolve_paths
from grpo_dashboard.spec.run_spec import RunSpec

from .conftest import REPO


@pytest.mark.parametrize("name", ["../../etc/passwd", "/abs/path", "..", "a/../../b", "x\x00y", "C:\\evil", " ", "é"])
def test_run_names_never_escape_the_runs_directory(name: str, tmp_path: Path) -> None:
    run_id = make_run_id(name)
    assert all(c.isascii() and (c.isalnum() or c == "-") for c in run_id)
    runs_root = tmp_path / "runs"
    assert (runs_root / run_id).resolve().parent == runs_root.resolve()


def test_resolved_output_dir_defaults_inside_the_run_dir(tmp_path: Path) -> None:
    spec = RunSpec.from_dict({"name": "../../x", "model": {"name_or_path": "Qwen/Qwen2.5-0.5B"}})
    run_dir = tmp_path / "runs" / make_run_id(spec.name)
    resolved = resolve_paths(spec, tmp_path, run_dir)
    assert Path(resolved.output_dir) == run_dir / "output"


SHELL_CALLS = {("os", "system"), ("os", "popen"), ("subprocess", "getoutput"), ("subprocess", "getstatusoutput")}


def python_files() -> list[Path]:
    return [p for d in ("grpo_dashboard", "jobs") for p in (REPO / d).rglob("*.py")] + [REPO / "app.py"]


def test_nothing_is_executed_through_a_shell() -> None:
    offenders = []
    for path in python_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                if (
                    isinstance(func, ast.Attribute)
                    and isinstance(func.value, ast.Name)
                    and (func.value.id, func.attr) in SHELL_CALLS
                ):
                    offenders.append(f"{path}:{node.lineno} {func.value.id}.{func.attr}")
                for kw in node.keywords:
                    if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                        offenders.append(f"{path}:{node.lineno} shell=...")
    assert offenders == []
    assert len(python_files()) > 20  # the scan really covered the code


def test_the_dashboard_never_passes_trust_remote_code() -> None:
    """In the dashboard's own process every `trust_remote_code=` is the literal False (the job alone may trust)."""
    calls = []
    for path in (REPO / "grpo_dashboard").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    if kw.arg == "trust_remote_code":
                        literal_false = isinstance(kw.value, ast.Constant) and kw.value.value is False
                        calls.append((f"{path.name}:{node.lineno}", literal_false))
    assert calls, "the scan found no tokenizer loads at all"
    assert [where for where, ok in calls if not ok] == []
