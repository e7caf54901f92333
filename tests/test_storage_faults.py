"""Storage faults: a read-only or full data directory gives a clear error and never a damaged database.

Real faults, not mocks: the child process runs in its own mount namespace (`unshare -m`, root only) where the data
directory is a read-only bind mount or a tiny tmpfs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from grpo_dashboard.store.db import Run, Store

from .conftest import REPO

HAVE_MOUNT_NS = (
    shutil.which("unshare") is not None
    and os.geteuid() == 0
    and subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0
)
needs_ns = pytest.mark.skipif(not HAVE_MOUNT_NS, reason="needs root and `unshare -m` for real mount faults")


def in_namespace(setup: str, command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run `setup` (shell, mounts) then exec `command` inside a private mount namespace."""
    script = f'set -e\n{setup}\nexec "$@"'
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", *command],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )


def log_lines(first: int, last: int) -> str:
    return "".join(
        json.dumps(
            {
                "v": 1,
                "type": "log",
                "split": "train",
                "step": s,
                "time": float(s),
                "metrics": {f"m{k}": s + k / 100 for k in range(27)},
            }
        )
        + "\n"
        for s in range(first, last + 1)
    )


@needs_ns
def test_read_only_data_dir_gives_a_clear_error_and_keeps_the_database(tmp_path: Path, data_dir: Path) -> None:
    store = Store()
    store.insert_run(
        Run(
            id="kept",
            name="kept",
            spec_yaml="",
            backend="local",
            status="completed",
            created_at=time.time(),
            run_dir=str(tmp_path),
        )
    )
    store.close()
    spec = tmp_path / "spec.yaml"
    spec.write_text((REPO / "examples" / "smoke.yaml").read_text())
    env = {**os.environ, "GRPO_DASHBOARD_DATA_DIR": str(data_dir)}
    ro = f"mount --bind {data_dir} {data_dir}\nmount -o remount,bind,ro {data_dir}"
    launched = in_namespace(ro, [sys.executable, "-m", "grpo_dashboard", "launch", str(spec)], env)
    assert launched.returncode == 5, launched.stdout + launched.stderr
    assert "is not writable" in launched.stderr and "GRPO_DASHBOARD_DATA_DIR" in launched.stderr
    assert "Traceback" not in launched.stderr
    store = Store()
    assert store.integrity_ok()
    assert [r.id for r in store.list_runs()] == ["kept"]
    assert not (data_dir / "runs").exists()


@needs_ns
def test_full_disk_during_ingestion_fails_cleanly_and_loses_nothing(tmp_path: Path) -> None:
    source = tmp_path / "metrics.jsonl"
    source.write_text(log_lines(1, 20))
    big = tmp_path / "more.jsonl"
    big.write_text(log_lines(21, 20000))
    child = textwrap.dedent(f"""
        import json, sys
        from grpo_dashboard.errors import StoreError
        from grpo_dashboard.store.ingest import ingest_file
        from grpo_dashboard.store.db import Run, Store
        st = Store()
        st.insert_run(Run(id="r", name="r", spec_yaml="", backend="local", status="running", created_at=0.0,
                          run_dir="/"))
        ingest_file(st, "r", {str(source)!r})
        before = st.get_run("r").ingest_offset
        with open({str(source)!r}, "a") as f, open({str(big)!r}) as more:
            f.write(more.read())
        error = None
        try:
            ingest_file(st, "r", {str(source)!r})
        except StoreError as exc:
            error = str(exc)
        st.close()
        st = Store()
        print(json.dumps({{"error": error, "ok": st.integrity_ok(), "before": before,
                          "after": st.get_run("r").ingest_offset, "steps": len(st.series("r", "m0"))}}))
    """)
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    env = {**os.environ, "GRPO_DASHBOARD_DATA_DIR": str(mount_point / "data")}
    result = in_namespace(f"mount -t tmpfs -o size=600k tmpfs {mount_point}", [sys.executable, "-c", child], env)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["error"] is not None and "is full" in out["error"], out
    assert out["ok"] is True
    assert out["after"] == out["before"], "a failed ingestion must not advance the offset (nothing lost)"
    assert out["steps"] == 20


def test_unwritable_data_dir_path_is_a_store_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("GRPO_DASHBOARD_DATA_DIR", str(blocker / "data"))
    result = subprocess.run(
        [sys.executable, "-m", "grpo_dashboard", "runs"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=os.environ.copy(),
        timeout=60,
    )
    assert result.returncode == 5
    assert "cannot be used" in result.stderr or "is not writable" in result.stderr
    assert "Traceback" not in result.stderr
