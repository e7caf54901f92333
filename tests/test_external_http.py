"""The callback's HTTP transport against the running app: a plain TRL script from a shell sends its run to the
dashboard in Space mode with alice's token (the run is alice's; bob cannot write to it or see it), the ingest route's
refusals (no or wrong token 401, another user's run 404, a malformed batch 400 whole, an unreadable record kept in
rejected.jsonl and counted). A dashboard that goes down mid-run, and Cancel over HTTP: test_external_http_local.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from grpo_dashboard.store.external import EXTERNAL

from .conftest import REPO, jsonl_records, same_values, store_records, wait_for
from .space_harness import ALICE, BOB, serve_space, sign_in

SCRIPT = REPO / "tests" / "plain_trl_script.py"
INGEST = "grpo/ingest"


def start_script(model: Path, work: Path, url: str, *args: str, token: str | None = None) -> subprocess.Popen[str]:
    """The plain TRL script sending to `url` (spooled under `work/spool`), from a shell in `work`."""
    work.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "PYTHONPATH": str(REPO),
        "GRPO_DASHBOARD_SPOOL": str(work / "spool"),
    }
    env.pop("HF_TOKEN", None)
    if token:
        env["HF_TOKEN"] = token
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), str(model), str(work / "out"), "--dashboard", url, *args],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def batch(run: str, lines: list[str], offset: int = 0, spec: str | None = "name: attack\n") -> dict[str, Any]:
    out: dict[str, Any] = {"v": 1, "run": run, "stream": "metrics", "offset": offset, "lines": lines}
    if spec is not None:
        out["spec"] = spec
    return out


LOG = json.dumps({"v": 1, "type": "log", "split": "train", "step": 1, "metrics": {"reward": 0.5}})


@pytest.fixture(scope="module")
def space(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    data = tmp_path_factory.mktemp("ingest-data")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRPO_DASHBOARD_DATA_DIR", str(data))
        with serve_space(data, tmp_path_factory.mktemp("hub")) as app:
            yield app


@pytest.fixture
def space_data(space: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Path:
    path = Path(space["store"].path).parent
    monkeypatch.setenv("GRPO_DASHBOARD_DATA_DIR", str(path))
    return path


def test_ingest_refusals_on_a_space(space: dict[str, Any], space_data: Path) -> None:
    url, store = space["url"], space["store"]
    with httpx.Client(timeout=30) as http:
        # no token: the gate answers before the route reads anything
        assert http.post(url + INGEST, json=batch("mine-run", [LOG])).status_code == 401
        wrong = http.post(url + INGEST, json=batch("mine-run", [LOG]), headers={"Authorization": "Bearer hf_wrong"})
        assert wrong.status_code == 401
        alice = {"Authorization": f"Bearer {ALICE}"}
        bob = {"Authorization": f"Bearer {BOB}"}
        ok = http.post(url + INGEST, json=batch("alice-attack-run", [LOG]), headers=alice)
        assert ok.status_code == 200 and ok.json()["received"] == len(LOG) + 1, ok.text
        assert store.get_run("alice-attack-run").owner == "alice"
        # bob's token cannot write to alice's run, even with the right offset; alice's run is unchanged
        theirs = http.post(url + INGEST, json=batch("alice-attack-run", [LOG], offset=len(LOG) + 1), headers=bob)
        assert theirs.status_code == 404 and "of yours" in theirs.json()["error"]
        assert store.get_run("alice-attack-run").n_records == 1
        # a retry of what was received is acknowledged, not written again
        again = http.post(url + INGEST, json=batch("alice-attack-run", [LOG]), headers=alice)
        assert again.status_code == 200 and store.get_run("alice-attack-run").n_records == 1
        # malformed batches are refused whole with the reason, nothing written
        before = {p.name for p in (space_data / "runs").iterdir()}
        for body, reason in (
            (b"{not json", "not JSON"),
            (json.dumps({**batch("x-run-1", [LOG]), "offset": -1}).encode(), "offset = -1"),
            (json.dumps({**batch("../etc", [LOG])}).encode(), "run = '../etc'"),
            (json.dumps({**batch("x-run-2", [LOG]), "lines": "text"}).encode(), "lines:"),
            (json.dumps(batch("x-run-3", [LOG], spec="name: [unclosed")).encode(), "spec: not a run spec"),
        ):
            refused = http.post(url + INGEST, content=body, headers={**alice, "Content-Type": "application/json"})
            assert refused.status_code == 400 and reason in refused.json()["error"], refused.text
        assert {p.name for p in (space_data / "runs").iterdir()} == before
        big = http.post(url + INGEST, content=b"x" * (5 * 1024 * 1024), headers=alice)
        assert big.status_code == 413
        # an unreadable record is kept with its reason and counted; the readable ones are ingested
        mixed = http.post(
            url + INGEST, json=batch("alice-mixed-run", [LOG, '{"type": "log", "step": -3}', "garbage"]), headers=alice
        )
        assert mixed.status_code == 200 and mixed.json()["rejected"] == 2
        run = store.get_run("alice-mixed-run")
        assert run.n_records == 1 and run.n_skipped == 2
        rejected = [json.loads(x) for x in (Path(run.run_dir) / "rejected.jsonl").read_text().splitlines()]
        assert [r["line"] for r in rejected] == ['{"type": "log", "step": -3}', "garbage"] and rejected[0]["reason"]
        # the run's live stream: alice sees her run, bob is answered as for a missing run
        for user, status in (("alice", 200), ("bob", 404)):
            cookie = sign_in(url, user)
            with http.stream("GET", url + "grpo/live?run=alice-mixed-run", headers={"Cookie": cookie}) as r:
                assert r.status_code == status


@pytest.mark.training
def test_plain_script_over_http_on_a_space_is_alices_run(
    space: dict[str, Any], space_data: Path, tiny_model: Path, tmp_path: Path
) -> None:
    store = space["store"]
    proc = start_script(tiny_model, tmp_path / "a", space["url"], "--steps", "3", token=ALICE)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    (spool,) = (tmp_path / "a" / "spool").iterdir()
    run = wait_for(lambda: (r := store.get_run(spool.name)).status == "completed" and r, timeout=60)
    assert run.owner == "alice" and run.backend == EXTERNAL and run.last_step == 3
    server_dir = Path(run.run_dir)
    assert (server_dir / "metrics.jsonl").read_bytes() == (spool / "metrics.jsonl").read_bytes()
    assert (server_dir / "samples.jsonl").read_bytes() == (spool / "samples.jsonl").read_bytes()
    assert same_values(store_records(store, run.id), jsonl_records(spool / "metrics.jsonl"))
    # bob's script with bob's token makes bob's run; a wrong token is warned about once and spooled
    bad = start_script(tiny_model, tmp_path / "w", space["url"], "--steps", "1", token="hf_wrong")
    out, _ = bad.communicate(timeout=300)
    assert bad.returncode == 0 and out.count("refused the token (401") == 1, out[-3000:]
    (left,) = (tmp_path / "w" / "spool").iterdir()
    assert "finished" in (left / "metrics.jsonl").read_text() and "integrations.send" in out
