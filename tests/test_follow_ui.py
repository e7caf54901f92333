"""The UI's "Import a run" with Follow, through the served app and gradio's client: a TensorBoard directory that a
plain TRL script (transformers' own callback) is still writing is followed live from its path (the same `follow` as
`import-run PATH --follow`) and ends with what `import-run` reads from the finished source; the field errors; and
on a Space, where server paths are not the user's, a path or Follow is refused before anything is read."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from gradio_client import handle_file

from grpo_dashboard.store.db import Store
from grpo_dashboard.store.external import EXTERNAL
from grpo_dashboard.store.follow import FOLLOWED
from grpo_dashboard.store.importers import import_run

from .conftest import same_values, served_client, store_records, wait_for
from .space_harness import serve_space, space_clients
from .test_import_trl_loggers import run_script


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    data = tmp_path_factory.mktemp("follow-ui")
    with served_client(data) as c:
        c.data_dir = data
        yield c


def test_import_field_errors_name_the_field(client: Any, tmp_path: Path) -> None:
    log = tmp_path / "a.jsonl"
    log.write_text('{"step": 1, "reward": 0.5}\n')
    for args, message in (
        ((None, str(tmp_path / "missing"), True, 30), "no such file or directory"),
        ((None, "", True, 30), "follow: give the path"),
        ((handle_file(str(log)), str(log), False, 30), "not both"),
        ((None, str(log), True, 0), "Follow ends after: 0"),
        ((None, "", False, 30), "Choose a file"),
    ):
        with pytest.raises(Exception, match=message):
            client.predict(*args, api_name="/import_run")
    assert Store(client.data_dir / "dashboard.db").list_runs() == []
    # a path, not followed: the CLI's `import-run PATH`
    note = client.predict(None, str(log), False, 30, api_name="/import_run")
    assert "Imported **" in note and "1 records, read-only" in note


@pytest.mark.training
def test_follow_a_tensorboard_dir_still_being_written(client: Any, tiny_model: Path, tmp_path: Path) -> None:
    store = Store(client.data_dir / "dashboard.db")
    work = tmp_path / "w"
    (work / "tb").mkdir(parents=True)
    failed: list[BaseException] = []

    def train() -> None:
        try:
            run_script(tiny_model, work, "--steps", "6", "--step-sleep", "2", "--report-to", "tensorboard")
        except BaseException as exc:  # reported below
            failed.append(exc)

    script = threading.Thread(target=train, daemon=True)
    script.start()
    note = client.predict(None, str(work / "tb"), True, 15, api_name="/import_run")
    assert "Following" in note or "Waiting for the first records" in note, note
    run = wait_for(
        lambda: next((r for r in store.list_runs() if r.backend == EXTERNAL and r.n_records >= 1), None), timeout=240
    )
    assert script.is_alive(), "the followed run was seen only after the script ended"
    assert run.status == "running" and FOLLOWED in run.spec_yaml
    script.join(timeout=300)
    assert not failed, failed
    run = wait_for(lambda: (r := store.get_run(run.id)).status == "completed" and r, timeout=60)
    after = import_run(work / "tb", store)
    assert run.last_step == 6 and run.n_records == after.n_records
    assert same_values(store_records(store, run.id), store_records(store, after.id))


def test_a_space_refuses_server_paths_and_follow(tmp_path_factory: pytest.TempPathFactory) -> None:
    data = tmp_path_factory.mktemp("follow-space")
    secret = tmp_path_factory.mktemp("elsewhere") / "log.jsonl"
    secret.write_text('{"step": 1, "reward": 0.5}\n')
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRPO_DASHBOARD_DATA_DIR", str(data))
        with serve_space(data, tmp_path_factory.mktemp("hub")) as app:
            alice = space_clients(app["url"])["alice"]
            for args in ((None, str(secret), False, 30), (None, str(secret), True, 30), (None, "", True, 30)):
                with pytest.raises(Exception, match="on this Space a run is imported from an upload") as err:
                    alice.predict(*args, api_name="/import_run")
                assert str(secret) not in str(err.value)
            assert app["store"].list_runs() == []
