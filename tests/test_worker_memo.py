"""The agent check's worker memo: an unchanged spec is answered from memory, any edit runs the sandboxed worker again.

The worker itself runs for real (in the sandbox); the spy only counts how often it is started.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grpo_dashboard.checks import agents, sandbox, worker_memo
from grpo_dashboard.launch.runs import validate
from grpo_dashboard.spec.run_spec import RunSpec

REPO = Path(__file__).resolve().parent.parent

GOOD = '''
def add(a: int, b: int) -> str:
    """Add two integers.

    Args:
        a: The first.
        b: The second.
    """
    return str(a + b)
'''


def _spec(tool_file: Path, **agent: object) -> RunSpec:
    spec = RunSpec.from_file(REPO / "examples" / "agent_calculator.yaml").to_dict()
    spec["dataset"]["data_files"] = str(REPO / "examples" / "data" / "agent_calc.jsonl")
    spec["agent"]["tools"] = [f"{tool_file}:add"]
    spec["agent"].update(agent)
    return RunSpec.from_dict(spec)


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    worker_memo.clear()
    calls: list[str] = []
    real = sandbox.run_module

    def counting(module: str, *args: object, **kwargs: object) -> object:
        calls.append(module)
        return real(module, *args, **kwargs)

    monkeypatch.setattr(sandbox, "run_module", counting)
    return calls


def _tool_errors(spec: RunSpec) -> list[str]:
    return [e.message for e in validate(spec, REPO).errors if e.field.startswith("agent.tools")]


def test_an_unchanged_spec_is_answered_from_memory_and_an_edit_runs_the_worker_again(
    tmp_path: Path, started: list[str]
) -> None:
    tool = tmp_path / "tools.py"
    tool.write_text(GOOD)
    assert _tool_errors(_spec(tool)) == [] and len(started) == 1
    assert _tool_errors(_spec(tool)) == [] and len(started) == 1  # the same request, the same files

    tool.write_text(GOOD.replace('"""Add two integers.', '"""').replace("        a: The first.\n", ""))
    errors = _tool_errors(_spec(tool))
    assert len(started) == 2 and errors, "an edited tool file must be checked again"
    assert _tool_errors(_spec(tool)) == errors and len(started) == 2  # the memo keeps problems as well

    tool.write_text(GOOD)
    assert _tool_errors(_spec(tool, max_tool_calling_iterations=3)) == [] and len(started) == 3  # a field changed


def test_a_worker_that_gave_no_answer_is_not_remembered(
    tmp_path: Path, started: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = tmp_path / "tools.py"
    tool.write_text(GOOD)
    monkeypatch.setattr(agents, "WORKER_TIMEOUT_S", 0.05)
    report = validate(_spec(tool), REPO)
    assert any(w.field == "agent" and "timed out" in w.message for w in report.warnings), report.warnings
    monkeypatch.setattr(agents, "WORKER_TIMEOUT_S", 120.0)
    report = validate(_spec(tool), REPO)
    assert len(started) == 2 and not any(w.field == "agent" for w in report.warnings), report.warnings
