"""The reward contract check flags a deliberately broken reward of each kind, runs custom code only in the sandbox,
and exposes the same through `python -m grpo_dashboard check-rewards`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from grpo_dashboard.checks.reward_check import check_rewards
from grpo_dashboard.cli import main as cli_main

REPO = Path(__file__).resolve().parent.parent
MATH = REPO / "examples" / "data" / "math_tiny.jsonl"

BROKEN = """
import os, time

def raises(completions, **kwargs):
    raise RuntimeError("boom")

def constant(completions, **kwargs):
    return [0.5 for _ in completions]

def nothing(completions, **kwargs):
    return [None for _ in completions]

def slow(completions, **kwargs):
    time.sleep(0.02 * len(completions))
    return [float(len(c if isinstance(c, str) else c[0]["content"]) > 0) for c in completions]

def hangs(completions, **kwargs):
    while True:
        pass

def needs_column(completions, **kwargs):
    return [float(a in (c if isinstance(c, str) else c[0]["content"])) for c, a in zip(completions, kwargs["answer"])]

def only_strings(completions, **kwargs):
    return [float(c.strip().startswith("<think>")) for c in completions]

def wrong_length(completions, **kwargs):
    return [1.0]

def spy(completions, **kwargs):
    with open(os.environ.get("SPY_OUT", "spy.json"), "w") as f:
        pass
    import json, socket
    leaked = {"pid": os.getpid(), "token": os.environ.get("HF_TOKEN"), "home": os.environ.get("HOME")}
    try:
        socket.create_connection(("1.1.1.1", 80), timeout=1)
        leaked["net"] = True
    except Exception as exc:
        leaked["net"] = type(exc).__name__
    print("SPY" + json.dumps(leaked))
    return [float("\\\\boxed" in (c if isinstance(c, str) else c[0]["content"])) for c in completions]
"""


def make_spec(tmp_path: Path, rewards: list[dict[str, Any]], **dataset: Any) -> Path:
    """A spec over the tiny math data with the given rewards, plus the broken custom rewards beside it."""
    (tmp_path / "broken.py").write_text(BROKEN)
    spec = {
        "name": "check",
        "model": {"name_or_path": str(tmp_path / "tiny"), "build_tiny": True},
        "dataset": {"data_files": str(MATH), "prompt_column": "question", **dataset},
        "rewards": rewards,
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def flags_of(report: Any, name: str, severity: str = "error") -> set[str]:
    rep = next(r for r in report.rewards if r.name == name)
    return {f.code for f in rep.flags if f.severity == severity}


def test_good_rewards_pass_and_disagree_on_format(tmp_path: Path) -> None:
    spec = make_spec(
        tmp_path,
        [
            {"name": "fmt", "builtin": "think_format"},
            {"name": "acc", "builtin": "math_accuracy"},
            {"name": "num", "builtin": "numeric_match", "params": {"answer_column": "solution"}},
        ],
    )
    report = check_rewards(spec, n_rows=4, base_dir=tmp_path)
    assert report.ok, report.to_text()
    assert report.reference_column == "solution" and report.rows == 4
    acc = next(r for r in report.rewards if r.name == "acc")
    assert acc.values("ideal", "standard") == [1.0] * 4 and acc.values("empty", "standard") == [0.0] * 4
    fmt = next(r for r in report.rewards if r.name == "fmt")
    assert fmt.values("wrong_format", "standard") == [0.0] * 4  # format and accuracy disagree here
    assert acc.values("wrong_format", "standard") == [1.0] * 4
    assert acc.ms_per_completion is not None and acc.ms_per_completion < 1000
    text = report.to_text()
    assert "acc (accuracy, builtin math_accuracy)" in text and "OK: every reward passed" in text


@pytest.mark.parametrize(
    ("func", "code"),
    [
        ("raises", "error"),
        ("constant", "constant"),
        ("nothing", "all_none"),
        ("needs_column", "missing_column"),
        ("wrong_length", "error"),
    ],
)
def test_broken_custom_reward_is_flagged(tmp_path: Path, func: str, code: str) -> None:
    spec = make_spec(tmp_path, [{"name": func, "function": f"broken.py:{func}"}])
    report = check_rewards(spec, n_rows=3, base_dir=tmp_path)
    assert not report.ok
    assert code in flags_of(report, func), report.to_text()


def test_error_message_names_the_exception(tmp_path: Path) -> None:
    report = check_rewards(
        make_spec(tmp_path, [{"name": "raises", "function": "broken.py:raises"}]), n_rows=2, base_dir=tmp_path
    )
    msg = next(f.message for f in report.rewards[0].flags if f.code == "error")
    assert "RuntimeError: boom" in msg and "broken.py" in msg


def test_slow_reward_is_flagged_against_the_budget(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, [{"name": "slow", "function": "broken.py:slow"}])
    report = check_rewards(spec, n_rows=3, base_dir=tmp_path, budget_ms=5)
    assert "slow" in flags_of(report, "slow")
    assert report.rewards[0].ms_per_completion >= 15


def test_hanging_reward_is_killed_and_flagged(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, [{"name": "hangs", "function": "broken.py:hangs"}])
    report = check_rewards(spec, n_rows=2, base_dir=tmp_path, timeout_s=3)
    assert report.rewards[0].timed_out
    assert "slow" in flags_of(report, "hangs")


def test_builtin_reading_a_missing_column_is_flagged_without_running(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, [{"name": "mc", "builtin": "multiple_choice"}])
    report = check_rewards(spec, n_rows=2, base_dir=tmp_path)
    assert flags_of(report, "mc") == {"missing_column"}
    assert "'answer'" in report.rewards[0].flags[0].message and report.rewards[0].results == []


def test_constant_builtin_and_format_blind_regex(tmp_path: Path) -> None:
    spec = make_spec(
        tmp_path,
        [
            {"name": "const", "builtin": "constant", "params": {"value": 1.0}},
            {"name": "loose", "builtin": "regex", "params": {"pattern": r"\d"}},
            {"name": "acc", "builtin": "math_accuracy"},
        ],
    )
    report = check_rewards(spec, n_rows=3, base_dir=tmp_path)
    assert "constant" in flags_of(report, "const")
    assert "format_blind" in flags_of(report, "loose")
    assert flags_of(report, "acc") == set()


def test_accuracy_reading_the_wrong_column_misses_the_ideal(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, [{"name": "acc", "builtin": "exact_match", "params": {"answer_column": "question"}}])
    report = check_rewards(spec, n_rows=3, base_dir=tmp_path, reference_column="solution")
    assert flags_of(report, "acc") == {"constant"}  # the question never matches: 0 for every completion
    assert next(r for r in report.rewards if r.name == "acc").values("ideal", "standard") == [0.0] * 3


def test_conversational_crash_is_an_error_when_training_is_conversational(tmp_path: Path) -> None:
    chat = make_spec(
        tmp_path, [{"name": "only_strings", "function": "broken.py:only_strings"}], system_prompt="Answer."
    )
    report = check_rewards(chat, n_rows=2, base_dir=tmp_path)
    assert report.conversational and "error" in flags_of(report, "only_strings")
    plain = make_spec(tmp_path, [{"name": "only_strings", "function": "broken.py:only_strings"}])
    report = check_rewards(plain, n_rows=2, base_dir=tmp_path)
    assert "format_crash" in flags_of(report, "only_strings", "note")


def test_custom_code_runs_only_in_the_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_fakeSecretToken123")
    inline = {"name": "inline", "builtin": "python", "params": {"code": BROKEN, "function": "spy"}}
    spec = make_spec(tmp_path, [{"name": "spy", "function": "broken.py:spy"}, inline])
    report = check_rewards(spec, n_rows=2, base_dir=tmp_path)
    seen = [json.loads(line[3:]) for r in report.rewards for line in r.log_tail.splitlines() if line.startswith("SPY")]
    assert len(seen) >= 2
    for leaked in seen:
        assert leaked["pid"] != os.getpid()
        assert leaked["token"] is None
        assert leaked["net"] is not True
        assert leaked["home"] != os.environ.get("HOME")
    assert "hf_fake" not in json.dumps(report.to_dict())
    assert not (tmp_path / "spy.json").exists()  # written in the sandbox's own temporary directory
    assert report.ok, report.to_text()


def test_cli_check_rewards_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = make_spec(tmp_path, [{"name": "acc", "builtin": "math_accuracy"}])
    assert cli_main(["check-rewards", str(good), "--rows", "2"]) == 0
    assert "OK: every reward passed" in capsys.readouterr().out
    bad = make_spec(tmp_path, [{"name": "constant", "function": f"{tmp_path / 'broken.py'}:constant"}])
    assert cli_main(["check-rewards", str(bad), "--rows", "2", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["rewards"][0]["flags"][0]["code"] == "constant"
    assert cli_main(["check-rewards", str(tmp_path / "nope.yaml")]) == 2
    broken_data = tmp_path / "bad.jsonl"
    broken_data.write_text('{"question": "x"}\n{not json\n')
    spec = yaml.safe_load(good.read_text())
    spec["dataset"]["data_files"] = str(broken_data)
    (tmp_path / "s2.yaml").write_text(yaml.safe_dump(spec))
    assert cli_main(["check-rewards", str(tmp_path / "s2.yaml")]) == 2
    assert "line 2 is not valid JSON" in capsys.readouterr().err
