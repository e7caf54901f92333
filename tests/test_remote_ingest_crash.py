"""The HTTP transport's receiving side killed in the middle of accepting a batch: a real child process runs the real
`remote_ingest.accept` and dies (os._exit) at one of three points; the parent then receives the callback's retry of
the same batch, as the sender does when its answer never came. Every line lands once, the run's records equal the
lines sent, and nothing half-written stays behind."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grpo_dashboard.store import remote_ingest
from grpo_dashboard.store.db import Store

REPO = Path(__file__).resolve().parents[1]
RUN = "crash-run-1"


def log(step: int) -> str:
    return json.dumps({"v": 1, "type": "log", "split": "train", "step": step, "metrics": {"reward": step / 10}})


FIRST = [log(s) for s in (1, 2, 3)]
SECOND = [log(s) for s in (4, 5, 6)] + ["not a record"]


def body(lines: list[str], offset: int, spec: bool) -> bytes:
    batch = {"v": 1, "run": RUN, "stream": "metrics", "offset": offset, "lines": lines}
    if spec:
        batch["spec"] = "name: crash\n"
    return json.dumps(batch).encode()


def size(lines: list[str]) -> int:
    return sum(len(x.encode()) + 1 for x in lines)


# The child accepts FIRST, then SECOND with a hook on the state file's saves that kills the process at `point`:
# right after the intent is saved (nothing appended), after the intent and half of the append (a torn write), or at
# the save that records the finished append.
CHILD = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from grpo_dashboard.store import remote_ingest
    from grpo_dashboard.store.db import Store

    point, first, second = sys.argv[1], sys.argv[2].encode(), sys.argv[3].encode()
    store = Store()
    remote_ingest.accept(store, None, first)
    save = remote_ingest._save_state

    def hook(run_dir, state):
        if "pending" in state:
            save(run_dir, state)
            if point == "torn":
                with open(Path(run_dir) / "metrics.jsonl", "ab") as f:
                    f.write(b'{"v": 1, "type": "log", "split": "tra')
            if point in ("intent", "torn"):
                os._exit(9)
        elif point == "commit":
            os._exit(9)
        else:
            save(run_dir, state)

    remote_ingest._save_state = hook
    remote_ingest.accept(store, None, second)
    """
)


@pytest.mark.parametrize("point", ["intent", "torn", "commit"])
def test_a_crash_while_accepting_a_batch_neither_loses_nor_duplicates_it(data_dir: Path, point: str) -> None:
    first, second = body(FIRST, 0, spec=True), body(SECOND, size(FIRST), spec=False)
    child = subprocess.run(
        [sys.executable, "-c", CHILD, point, first.decode(), second.decode()],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 9, child.stderr[-2000:]
    store = Store()
    run_dir = Path(store.get_run(RUN).run_dir)
    # the retry: the sender resends SECOND from its offset, then the next batch
    answer = remote_ingest.accept(store, None, second)
    assert answer["received"] == size(FIRST) + size(SECOND)
    third = [log(7)]
    answer = remote_ingest.accept(store, None, body(third, answer["received"], spec=False))
    assert answer["received"] == size(FIRST) + size(SECOND) + size(third)
    kept = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert kept == FIRST + SECOND[:3] + third  # each line once, in order, the unreadable one kept aside
    rejected = [json.loads(x)["line"] for x in (run_dir / "rejected.jsonl").read_text().splitlines()]
    assert rejected == ["not a record"]
    run = store.get_run(RUN)
    assert run.n_records == 7 and run.last_step == 7
    state = json.loads((run_dir / remote_ingest.STATE_FILE).read_text())
    assert "pending" not in state
