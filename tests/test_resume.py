"""Resume: a canceled run continues from a checkpoint as the same run, its curves carrying on (steps continue, none
duplicated or lost, an ingestion restart included), locally and on Hugging Face Jobs (fake Hub); a finding's onset
finds the checkpoint before it; bad checkpoints are refused with nothing changed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo_dashboard.launch.resume import ResumeError, checkpoint_before, checkpoints, choose, resume_run
from grpo_dashboard.launch.runs import cancel, launch, metrics_path, refresh, wait
from grpo_dashboard.store.db import Run, RunStatus, Store
from grpo_dashboard.views.completions import read_step, sample_steps

from .conftest import REPO, smoke_dict, wait_for, write_spec
from .fake_hub import FakeHub
from .hf_jobs_helpers import TOKEN, follow_until_done, hf_spec


def _logged_steps(lines: list[str]) -> list[list[int]]:
    """Train steps per job attempt, in the order each attempt logged them (an attempt starts at `starting`)."""
    attempts: list[list[int]] = []
    for line in lines:
        marker = line.find("@@GRPO_DASHBOARD@@ ")
        if marker < 0 and not line.startswith('{"'):
            continue
        rec = json.loads(line[marker + len("@@GRPO_DASHBOARD@@ ") :] if marker >= 0 else line)
        if rec.get("event") == "starting":
            attempts.append([])
        elif rec.get("type") == "log" and rec.get("split") == "train":
            attempts[-1].append(rec["step"])
    return attempts


def _assert_continuous(store: Store, run: Run, ckpt: int, max_steps: int, attempts: list[list[int]]) -> None:
    steps = [s for s, _, _ in store.series(run.id, "reward")]
    assert steps == list(range(1, max_steps + 1))  # one point per step: nothing lost, nothing twice
    first, second = attempts
    assert max(first) >= ckpt and second[0] == ckpt + 1 and second[-1] == max_steps  # the resumed job went on
    loss = {s: v for s, v, _ in store.series(run.id, "loss")}
    assert len(loss) == max_steps


@pytest.mark.training
def test_local_run_canceled_after_a_checkpoint_resumes_with_continuous_curves(tiny_model: Path) -> None:
    store = Store()
    run = launch(smoke_dict(tiny_model, max_steps=14, save_strategy="steps", save_steps=4), store)
    wait_for(lambda: (refresh(store, store.get_run(run.id)).last_step or 0) >= 5, timeout=600)
    run = cancel(store, store.get_run(run.id), wait=True)
    assert run.status == "canceled"
    found = checkpoints(store, run)
    assert found and all(Path(p).is_dir() for p in found.values())
    ckpt = max(found)
    with pytest.raises(ResumeError, match="no checkpoint at step 99"):
        resume_run(store, run, 99)
    run = resume_run(store, store.get_run(run.id))
    assert run.status in ("queued", "running") and run.last_step == ckpt
    # Ingestion restarts in the middle of the resumed job: a watcher process is killed, then this one follows.
    watch = [sys.executable, "-m", "grpo_dashboard", "watch", "--interval", "0.2", "--until-idle"]
    watcher = subprocess.Popen(watch, cwd=REPO, env=os.environ.copy())
    try:
        wait_for(lambda: (Store().get_run(run.id).last_step or 0) >= ckpt + 2, timeout=600)
    finally:
        watcher.send_signal(signal.SIGKILL)
        watcher.wait()
    run = wait(Store(), store.get_run(run.id))
    assert run.status == "completed", run.error
    attempts = _logged_steps(metrics_path(run).read_text().splitlines())
    _assert_continuous(store, run, ckpt, 14, attempts)
    events = [e["event"] for e in store.events(run.id)]
    assert events.count("canceled") == 1 and events[-1] == "finished" and events.count("starting") == 2
    state = json.loads(
        (Path(run.output_dir) / f"checkpoint-{max(checkpoints(store, run))}" / "trainer_state.json").read_text()
    )
    assert state["global_step"] > ckpt


@pytest.mark.training
def test_hf_jobs_run_resumes_from_its_bucket_checkpoint(hub: FakeHub, tmp_path: Path) -> None:
    store = Store()
    spec = hf_spec(tmp_path)
    import yaml

    data = yaml.safe_load(spec.read_text())
    data["training"].update(max_steps=10, save_strategy="steps", save_steps=2)
    write_spec(spec, data)
    run = launch(spec, store, token=TOKEN, base_dir=REPO)
    wait_for(
        lambda: (
            2 in checkpoints(store, refresh(store, store.get_run(run.id)))
            and (store.get_run(run.id).last_step or 0) >= 3
        ),
        timeout=600,
    )
    run = cancel(store, store.get_run(run.id), wait=True, token=TOKEN)
    follow_until_done(store, run.id)
    run = store.get_run(run.id)
    assert run.status == "canceled"
    ckpt = max(checkpoints(store, run))
    run = resume_run(store, run, token=TOKEN)
    follow_until_done(store, run.id, timeout=600)
    run = store.get_run(run.id)
    assert run.status == "completed", run.error
    jobs = list(hub.jobs.values())
    assert len(jobs) == 2
    second = next(j for j in jobs if j.id != jobs[0].id) if jobs[0].stage == "CANCELED" else jobs[0]
    assert "--resume" not in " ".join(second.spec["command"])  # the checkpoint is in run.yaml, not the command
    attempts = _logged_steps(
        [*jobs[0].printed, *jobs[1].printed] if jobs[0].stage == "CANCELED" else [*jobs[1].printed, *jobs[0].printed]
    )
    _assert_continuous(store, run, ckpt, 10, attempts)
    events = [e["event"] for e in store.events(run.id)]
    assert events.count("starting") == 2 and events[-1] == "finished"
    sampled = sample_steps(run.run_dir)  # the remote job's completions came back with its log
    assert sampled and max(sampled) > ckpt and read_step(run.run_dir, sampled[-1])[0]["completion"]
    assert [e["seq"] for e in store.events(run.id)] == sorted(e["seq"] for e in store.events(run.id))


def _fake_run(store: Store, tmp_path: Path, name: str, steps: list[int]) -> Run:
    out = tmp_path / name / "output"
    for s in steps:
        (out / f"checkpoint-{s}").mkdir(parents=True)
    run = Run(
        id=name,
        name=name,
        spec_yaml=f"name: {name}\n",
        backend="local",
        status=RunStatus.CANCELED.value,
        created_at=time.time(),
        run_dir=str(tmp_path / name),
        output_dir=str(out),
    )
    store.insert_run(run)
    return run


def test_bad_checkpoints_are_refused_naming_what_exists_and_nothing_changes(tmp_path: Path) -> None:
    store = Store()
    a = _fake_run(store, tmp_path, "run-a", [5, 10, 15])
    b = _fake_run(store, tmp_path, "run-b", [4])
    none = _fake_run(store, tmp_path, "run-c", [])
    assert choose(store, a) == (15, str(Path(a.output_dir) / "checkpoint-15"))
    assert checkpoint_before(store, a, 12) == (10, str(Path(a.output_dir) / "checkpoint-10"))
    assert checkpoint_before(store, a, 5) is None
    with pytest.raises(ResumeError, match=r"no checkpoint at step 7; its checkpoints are at steps 5, 10, 15"):
        choose(store, a, "7")
    with pytest.raises(ResumeError, match="belongs to run run-b"):
        choose(store, a, str(Path(b.output_dir) / "checkpoint-4"))
    with pytest.raises(ResumeError, match="no checkpoint to resume from"):
        resume_run(store, none)
    active = store.get_run("run-a")
    store.update_run(active.id, status="running")
    with pytest.raises(ResumeError, match="still running"):
        resume_run(store, store.get_run("run-a"))
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_dashboard", "resume", "run-b", "--checkpoint", "9"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 1 and "no checkpoint at step 9" in proc.stderr
    assert store.get_run("run-b").status == "canceled" and not (Path(b.run_dir) / "run.yaml").exists()


def test_points_after_the_resumed_checkpoint_are_replaced_not_kept(tmp_path: Path) -> None:
    from grpo_dashboard.store.ingest import ingest_file

    store = Store()
    run = _fake_run(store, tmp_path, "run-t", [4])
    log = tmp_path / "m.jsonl"

    def lines(steps: range, value: float) -> str:
        return "".join(
            json.dumps(
                {
                    "v": 1,
                    "type": "log",
                    "split": "train",
                    "step": s,
                    "time": 1.0 + s,
                    "metrics": {"reward": value, "kl": None},
                }
            )
            + "\n"
            for s in steps
        )

    log.write_text(lines(range(1, 8), 0.1))
    store.update_run(run.id, status="running")
    ingest_file(store, run.id, log)
    assert store.truncate_after(run.id, 4) == 6  # steps 5..7 of reward and kl
    with open(log, "a") as f:
        f.write(lines(range(5, 10), 0.9))
    ingest_file(store, run.id, log)
    assert [(s, v) for s, v, _ in store.series(run.id, "reward")] == [
        (s, 0.1 if s <= 4 else 0.9) for s in range(1, 10)
    ]
    assert [v for _, v, _ in store.series(run.id, "kl")] == [None] * 9


@pytest.mark.training
def test_a_completed_run_resumes_only_with_a_new_max_steps_and_stops_there(tiny_model: Path) -> None:
    """Resuming a run at its end would train past max_steps and write over its final model: refused, with the
    option that fixes it; with --max-steps it trains on from the last checkpoint to the new end, no step twice."""
    store = Store()
    run = wait(store, launch(smoke_dict(tiny_model, max_steps=4, save_strategy="steps", save_steps=2), store))
    assert run.status == "completed", run.error
    spec_before = (Path(run.run_dir) / "run.yaml").read_text()
    with pytest.raises(ResumeError, match=r"reached max_steps 4 \(checkpoint at step 4\).*--max-steps 8"):
        resume_run(store, run)
    with pytest.raises(ResumeError, match="must be more than the checkpoint's step 4"):
        resume_run(store, run, max_steps=4)
    assert (Path(run.run_dir) / "run.yaml").read_text() == spec_before and store.get_run(run.id).status == "completed"
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_dashboard", "resume", run.id],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 1 and "--max-steps" in proc.stderr
    run = wait(Store(), resume_run(store, store.get_run(run.id), max_steps=6))
    assert run.status == "completed", run.error
    assert [s for s, _, _ in store.series(run.id, "reward")] == list(range(1, 7))
    state = json.loads((Path(run.output_dir) / "checkpoint-6" / "trainer_state.json").read_text())
    assert state["global_step"] == 6 and state["max_steps"] == 6


@pytest.mark.training
def test_save_steps_without_a_save_strategy_is_warned_at_launch(tiny_model: Path, tmp_path: Path) -> None:
    """`save_steps` with `save_strategy: "no"` saves no checkpoint, so the run could not be resumed: said before it
    starts, on the command line too."""
    spec = write_spec(tmp_path / "s.yaml", smoke_dict(tiny_model, max_steps=1, save_steps=1))  # smoke: "no"
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_dashboard", "launch", str(spec), "--wait"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 0, proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("warning: training.save_steps")]
    assert "save_strategy is 'no'" in line and "cannot be resumed" in line
    (run,) = Store().list_runs()
    assert not checkpoints(Store(), run)  # as warned: nothing to resume from


def test_an_imported_run_is_refused_with_why_and_nothing_changes(tmp_path: Path, data_dir: Path) -> None:
    """An imported run has no job the dashboard started: resume says so (and where to resume it) instead of
    listing backends, and the run is left as it was."""
    from grpo_dashboard.store.importers import import_run

    log = tmp_path / "trl.jsonl"
    log.write_text("".join(json.dumps({"reward": s / 10, "step": s}) + "\n" for s in range(1, 5)))
    store = Store()
    run = import_run(log, store)
    with pytest.raises(ResumeError, match=r"was imported from another tool's logs.*cannot resume it.*where it ran"):
        resume_run(store, run, 2, max_steps=10)
    after = store.get_run(run.id)
    assert (after.status, after.last_step, after.spec_yaml) == (run.status, run.last_step, run.spec_yaml)
