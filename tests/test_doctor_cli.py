"""The doctor CLI on every input format, its --json shape and its exit codes (0 healthy, 1 error, 2 unreadable)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.doctor_long_log import write_log
from grpo_dashboard.health import diagnose, doctor_main, load_log_records

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "health"
REPO = Path(__file__).resolve().parent.parent
RUN_DOCTOR = "import sys; from grpo_dashboard.health import doctor_main; sys.exit(doctor_main(sys.argv[1:]))"


def doctor(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """Run the doctor in a fresh interpreter, as a user would."""
    return subprocess.run(
        [sys.executable, "-c", RUN_DOCTOR, *map(str, args)], capture_output=True, text=True, cwd=REPO, timeout=120
    )


def run_json(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, list[dict]]:
    code = doctor_main([*map(str, args), "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


# ---- input formats ------------------------------------------------------------------------------------------------


def test_trainer_state_json_human_output_and_exit_1() -> None:
    result = doctor(FIXTURES / "trainer_state.json")
    assert result.returncode == 1, result.stderr
    assert "ERROR    entropy_collapse       first seen at step 12" in result.stdout
    assert "fix: " in result.stdout and "26 log records, steps 1-24" in result.stdout


def test_healthy_trainer_state_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, findings = run_json(capsys, FIXTURES / "healthy_state.json")
    assert code == 0 and findings == []


def test_checkpoint_dir_and_output_dir_use_the_newest_checkpoint(tmp_path: Path, capsys) -> None:
    out = tmp_path / "output"
    (out / "checkpoint-5").mkdir(parents=True)
    (out / "checkpoint-24").mkdir()
    (out / "checkpoint-9").mkdir()
    shutil.copy(FIXTURES / "healthy_state.json", out / "checkpoint-5" / "trainer_state.json")
    shutil.copy(FIXTURES / "healthy_state.json", out / "checkpoint-9" / "trainer_state.json")
    shutil.copy(FIXTURES / "trainer_state.json", out / "checkpoint-24" / "trainer_state.json")
    code, findings = run_json(capsys, out)
    assert code == 1 and "entropy_collapse" in {f["rule"] for f in findings}
    code, findings = run_json(capsys, out / "checkpoint-9")
    assert code == 0 and findings == []


def test_our_metrics_jsonl_uses_started_config_and_skips_half_written_line(capsys) -> None:
    code, findings = run_json(capsys, FIXTURES / "metrics.jsonl")
    assert code == 1
    truncation = next(f for f in findings if f["rule"] == "truncation")
    assert truncation["severity"] == "error" and "max_completion_length (now 12)" in truncation["remedy"]
    records, hints = load_log_records(FIXTURES / "metrics.jsonl")
    assert len(records) == 10 and records[0]["step"] == 1 and hints["beta"] == 0.0
    assert hints["reward_names"] == ["count_a"] and hints["max_steps"] == 50


def test_plain_trl_jsonl_with_old_key_names(capsys) -> None:
    code, findings = run_json(capsys, FIXTURES / "trl_old.jsonl")
    assert code == 0 and [f for f in findings if f["severity"] != "info"] == []
    result = doctor(FIXTURES / "trl_old.jsonl")
    assert "old TRL key names" in result.stdout and "No problems found" in result.stdout


def test_run_dir_with_metrics_jsonl_and_unsuffixed_jsonl(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(FIXTURES / "metrics.jsonl", run / "metrics.jsonl")
    assert run_json(capsys, run)[0] == 1
    plain = tmp_path / "log.txt"
    shutil.copy(FIXTURES / "trl_old.jsonl", plain)
    assert run_json(capsys, plain)[0] == 0


def test_a_json_list_of_log_dicts_is_accepted(tmp_path: Path, capsys) -> None:
    history = json.loads((FIXTURES / "trainer_state.json").read_text())["log_history"]
    path = tmp_path / "log_history.json"
    path.write_text(json.dumps(history))
    assert run_json(capsys, path)[0] == 1


def test_nan_literals_and_nested_entries_in_trainer_state(tmp_path: Path, capsys) -> None:
    state = json.loads((FIXTURES / "healthy_state.json").read_text())
    state["log_history"][20]["grad_norm"] = float("nan")
    state["log_history"][20]["loss"] = float("nan")  # a NaN loss too: an error (a lone NaN gradient is a warning)
    state["log_history"][21]["samples"] = [{"prompt": "p]", "completion": "}"}]
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps(state))
    code, findings = run_json(capsys, path)
    assert code == 1 and findings[0]["rule"] == "nan" and findings[0]["step"] == 21


# ---- real logs written by the job script (TRL GRPOTrainer on the tiny CPU model) ----------------------------------


def test_real_healthy_smoke_run_has_no_warning_or_error_at_the_end_nor_on_the_way(capsys) -> None:
    """examples/smoke.yaml: reward 0.08 -> 0.65 while ~96% of completions hit the 12-token cap from step 1."""
    code, findings = run_json(capsys, FIXTURES / "real_smoke")
    assert code == 0 and [f for f in findings if f["severity"] != "info"] == []
    records, hints = load_log_records(FIXTURES / "real_smoke" / "metrics.jsonl")
    for k in range(1, len(records) + 1):  # what the live panel and the in-job guard see after each log
        assert all(f.severity == "info" for f in diagnose(records[:k], hints)), records[k - 1]["step"]


def test_real_dapo_smoke_every_completion_truncated_and_masked(capsys) -> None:
    """examples/dapo.yaml at 12 tokens: mask_truncated_completions drops every completion, nothing trains."""
    code, findings = run_json(capsys, FIXTURES / "real_dapo_smoke")
    by_rule = {f["rule"]: f for f in findings}
    assert code == 1 and by_rule["truncation"]["severity"] == "error"
    assert "mask_truncated_completions" in by_rule["truncation"]["message"]
    assert "zero_gradient" in by_rule and "entropy_collapse" not in by_rule


def test_samples_beside_the_log_feed_duplicate_completions(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(FIXTURES / "real_smoke" / "metrics.jsonl", run / "metrics.jsonl")
    rows = [json.loads(line) for line in (FIXTURES / "real_smoke" / "samples.jsonl").read_text().splitlines()]
    for row in rows:
        row["completion"] = "aaaaaaaaaaaa"
    (run / "samples.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    code, findings = run_json(capsys, run)
    dup = next(f for f in findings if f["rule"] == "duplicate_completions")
    assert code == 1 and dup["severity"] == "error" and dup["step"] == 98
    code, findings = run_json(capsys, run, "--no-samples")
    assert code == 0 and "duplicate_completions" not in {f["rule"] for f in findings}


# ---- output shape and options -------------------------------------------------------------------------------------


def test_json_output_shape() -> None:
    result = doctor(FIXTURES / "trainer_state.json", "--json")
    findings = json.loads(result.stdout)
    assert isinstance(findings, list) and findings
    for f in findings:
        assert {"rule", "severity", "step", "message", "remedy", "metric", "evidence"} <= set(f)
        assert f["severity"] in {"info", "warning", "error"} and isinstance(f["step"], int)


def test_threshold_and_config_overrides(capsys) -> None:
    code, _ = run_json(capsys, FIXTURES / "metrics.jsonl", "--threshold", "truncation.enabled=false")
    assert code == 0
    code, findings = run_json(capsys, FIXTURES / "metrics.jsonl", "--config", "max_completion_length=64")
    assert "now 64" in next(f["remedy"] for f in findings if f["rule"] == "truncation")


def test_python_m_grpo_dashboard_doctor() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "grpo_dashboard", "doctor", str(FIXTURES / "healthy_state.json"), "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


# ---- exit status 2 ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda d: d / "missing.json",
        lambda d: d,  # a directory without any log
        lambda d: _write(d / "garbage.jsonl", "this is not json\nnor this\n"),
        lambda d: _write(d / "garbage.json", "{not json"),
        lambda d: _write(d / "binary.bin", "\x00\x01\x02garbage"),
        lambda d: _write(d / "empty.jsonl", ""),
        lambda d: _write(d / "no_history.json", '{"global_step": 3}'),
        lambda d: _write(d / "no_numbers.jsonl", '{"note": "hello"}\n{"note": "world"}\n'),
        lambda d: _write(d / "truncated.json", '{"log_history": [{"step": 1, "loss": 0.1}, {"st'),
    ],
    ids=[
        "missing",
        "empty-dir",
        "garbage-lines",
        "garbage-json",
        "binary",
        "empty",
        "no-history",
        "no-numbers",
        "truncated",
    ],
)
def test_unreadable_inputs_exit_2_with_a_clear_message(tmp_path: Path, make) -> None:
    path = make(tmp_path)
    result = doctor(path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.startswith("doctor: ") and str(path.name) in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_options_exit_2(capsys) -> None:
    assert doctor_main([str(FIXTURES / "metrics.jsonl"), "--threshold", "nonsense"]) == 2
    assert doctor_main([str(FIXTURES / "metrics.jsonl"), "--threshold", "truncation.wran=0.2"]) == 2
    assert "did you mean truncation.warn" in capsys.readouterr().err
    assert doctor_main([]) == 2
    assert doctor_main(["--help"]) == 0


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ---- scale --------------------------------------------------------------------------------------------------------


def test_long_jsonl_log_is_diagnosed(tmp_path: Path) -> None:
    """A 20,000-step healthy log goes through the CLI: exit 0, valid JSON, no warning or error.

    Speed and memory (10k / 100k steps, against rldoctor) are measured by benchmarks/doctor_long_log.py.
    """
    path = write_log(tmp_path / "big.jsonl", 20_000)
    result = doctor(path, "--json")
    assert result.returncode == 0, result.stderr
    assert [f for f in json.loads(result.stdout) if f["severity"] != "info"] == []
