"""`import-run --follow`: a trackio project, a TensorBoard directory and an offline W&B run directory written by
transformers' own callbacks during a real tiny TRL run (a plain script from a shell), followed while it trains: each
followed run is live (running, with records) before the script ends, and ends with exactly what `import-run` reads
from the finished source."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from grpo_dashboard.store.db import Run, Store
from grpo_dashboard.store.external import EXTERNAL
from grpo_dashboard.store.follow import follow, main
from grpo_dashboard.store.importers import import_run

from .conftest import same_values, store_records
from .test_import_trl_loggers import run_script

pytestmark = pytest.mark.training


def test_followed_sources_are_live_then_equal_to_their_import(tiny_model: Path, tmp_path: Path) -> None:
    store = Store()
    work = tmp_path / "w"
    sources = {
        "trackio": tmp_path / "trackio" / "trl-proj.db",
        "tensorboard": work / "tb",
        "wandb": work / "wb" / "wandb",
    }
    work.mkdir()
    (work / "wb" / "wandb").mkdir(parents=True)
    script_done = threading.Event()
    seen: dict[str, list[tuple[str, int, bool]]] = {k: [] for k in sources}
    followed: dict[str, Run] = {}
    errors: list[BaseException] = []

    def watch(kind: str, path: Path) -> None:
        def update(run: Run) -> None:
            seen[kind].append((run.status, run.n_records, not script_done.is_set()))

        try:
            followed[kind] = follow(path, Store(), idle_s=8.0, poll_s=0.3, wait_s=240.0, on_update=update)
        except BaseException as exc:  # reported by the test below
            errors.append(exc)

    threads = [threading.Thread(target=watch, args=item, daemon=True) for item in sources.items()]
    for t in threads:
        t.start()
    try:
        run_script(tiny_model, work, "--steps", "5", "--step-sleep", "1.5", "--report-to", "trackio,wandb,tensorboard")
    finally:
        script_done.set()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    for kind, path in sources.items():
        live = [n for status, n, during in seen[kind] if during and status == "running" and n >= 1]
        assert live, f"{kind}: the followed run was never live while the script ran: {seen[kind][-5:]}"
        run = store.get_run(followed[kind].id)
        assert run.status == "completed" and run.backend == EXTERNAL and run.last_step == 5
        after = import_run(path, store)
        assert same_values(store_records(store, run.id), store_records(store, after.id)), kind
        assert run.n_records == after.n_records


def test_follow_cli_ends_on_a_finished_source(tmp_path: Path, capsys: Any) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text("".join(f'{{"step": {s}, "reward": {s / 10}, "loss": 0.1}}\n' for s in range(1, 4)))
    assert main([str(log), "--follow", "--idle", "0.5"]) == 0
    assert "followed" in capsys.readouterr().out
    (run,) = Store().list_runs()
    assert run.status == "completed" and [s for s, _, _ in Store().series(run.id, "reward")] == [1, 2, 3]
