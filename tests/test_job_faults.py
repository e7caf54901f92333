"""Job crashes: killed with SIGKILL, exiting non-zero, or hanging silently past the stall timeout. Each ends in the
right state with a clear reason, its process group is gone, and the monitor keeps serving other runs."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from grpo_dashboard.launch.local import process as local_process
from grpo_dashboard.launch.runs import Monitor, launch, refresh
from grpo_dashboard.store.db import Store

from .conftest import smoke_dict, wait_for

pytestmark = pytest.mark.training


def custom_reward(tmp_path: Path, body: str) -> dict[str, str]:
    path = tmp_path / "reward.py"
    path.write_text("import os, time\n\ndef reward(completions, **kwargs):\n" + body + "\n")
    return {"name": "reward", "function": f"{path}:reward"}


def test_job_killed_with_sigkill_fails_with_the_signal_named(tiny_model: Path) -> None:
    store = Store()
    run = launch(smoke_dict(tiny_model, max_steps=5000), store)
    wait_for(lambda: (refresh(store, store.get_run(run.id)).last_step or 0) >= 2, timeout=600)
    os.killpg(run.pid, signal.SIGKILL)
    run = wait_for(lambda: (r := refresh(store, store.get_run(run.id))).status == "failed" and r, timeout=60)
    assert "killed by SIGKILL (signal 9)" in run.error
    assert run.exit_code == -9
    assert not local_process.group_alive(run.pid)


def test_job_exiting_non_zero_without_a_word(tiny_model: Path, tmp_path: Path) -> None:
    spec = smoke_dict(tiny_model)
    spec["rewards"] = [custom_reward(tmp_path, "    print('giving up', flush=True)\n    os._exit(3)")]
    store = Store()
    run = launch(spec, store)
    run = wait_for(lambda: (r := refresh(store, store.get_run(run.id))).status == "failed" and r, timeout=600)
    assert run.error.startswith("job exited with code 3 without reporting an end")
    assert "Last log line: giving up" in run.error
    assert run.exit_code == 3


def test_silent_hung_job_is_killed_after_the_stall_timeout(tiny_model: Path, tmp_path: Path) -> None:
    spec = smoke_dict(tiny_model)
    spec["rewards"] = [custom_reward(tmp_path, "    time.sleep(3600)\n    return [0.0] * len(completions)")]
    spec["backend"]["stall_timeout_s"] = 4
    healthy = smoke_dict(tiny_model, max_steps=30)
    store = Store()
    monitor = Monitor(store, interval_s=0.3).start()
    try:
        hung = launch(spec, store)
        other = launch(healthy, store)
        hung = wait_for(lambda: (r := store.get_run(hung.id)).status == "failed" and r, timeout=600)
        assert hung.error.startswith("stalled: no output for")
        assert "backend.stall_timeout_s = 4" in hung.error
        wait_for(lambda: not local_process.group_alive(hung.pid), timeout=30)
        other = wait_for(lambda: (r := store.get_run(other.id)).status in ("completed", "failed") and r, timeout=600)
        assert other.status == "completed", other.error  # the monitor kept serving the other run
        assert monitor.last_error is None
    finally:
        monitor.stop()


def test_stall_timeout_must_be_positive(tiny_model: Path) -> None:
    from grpo_dashboard.launch.runs import check

    spec = smoke_dict(tiny_model)
    spec["backend"]["stall_timeout_s"] = 0
    assert [e.field for e in check(spec)[1].errors] == ["backend.stall_timeout_s"]
    spec["backend"]["stall_timeout_s"] = None
    assert check(spec)[1].errors == []
