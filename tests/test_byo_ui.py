"""The app's bring-your-own-TRL endpoints, through the real served app and gradio's client: import a TRL config into
the New run YAML, import a run made elsewhere, filter runs by tag, offer the checkpoint before a finding's onset,
export a run's metrics, resume a finished run only with a new end."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from gradio_client import handle_file

from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.store.db import Run, RunStatus, Store

from .conftest import served_client, smoke_dict


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    data = tmp_path_factory.mktemp("byo-ui")
    with served_client(data) as c:
        c.data_dir = data
        yield c


def test_import_a_pasted_trl_config_into_the_new_run_yaml(client: Any) -> None:
    recipe = (
        "model_name_or_path: Qwen/Qwen2.5-0.5B-Instruct\ntorch_dtype: bfloat16\ndataset_name: trl-lib/x\n"
        "reward_funcs: [accuracy_reward]\nmax_prompt_length: 512\n"
    )
    out = client.predict(recipe, None, api_name="/import_trl")
    spec = RunSpec.from_yaml(out[0])
    assert spec.model.dtype == "bfloat16" and spec.training["beta"] == 0.04  # TRL 0.18 defaults, written out
    assert "| `max_prompt_length` | dropped |" in out[2]
    # the rows that change something come first; the keys kept as written are folded below them
    assert out[2].index("| `max_prompt_length` | dropped |") < out[2].index("<details>")
    assert out[2].index("<details>") < out[2].index("| `model_name_or_path` | mapped |")
    assert "keys need a look" in out[2]
    out = client.predict("model_name_or_path: a/b\nlearning_rat: 1\n", None, api_name="/import_trl")
    assert "| `learning_rat` | ignored |" in out[2] and "learning_rate" in out[2]  # as `trl grpo` ignores it
    with pytest.raises(Exception, match="code_language"):
        client.predict("model_name_or_path: a/b\ncode_language: cobol\n", None, api_name="/import_trl")


def test_import_a_run_filter_by_tag_and_export_metrics(client: Any, tmp_path: Path) -> None:
    log = tmp_path / "elsewhere.jsonl"
    log.write_text(
        "".join(json.dumps({"reward": s / 10, "num_tokens": 50.0 * s, "step": s}) + "\n" for s in range(1, 6))
    )
    note = client.predict(handle_file(str(log)), "", False, 30, api_name="/import_run")
    assert "Imported **elsewhere**" in note and "read-only" in note
    table = client.predict([], "imported", api_name="/runs_table")
    assert [row[0] for row in table["data"]] == ["elsewhere"]
    assert "imported" in table["data"][0][table["headers"].index("tags")]
    assert client.predict([], "no-such-tag", api_name="/runs_table")["data"] == []
    run_id = table["data"][0][-1]
    _, note, _ = client.predict(run_id, api_name="/resume_choices")
    assert "was imported" in note and "cannot resume it" in note
    path = client.predict(run_id, ".jsonl", api_name="/export_metrics")
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    assert [(r["step"], r["reward"]) for r in rows] == [(s, s / 10) for s in range(1, 6)]
    assert Store(client.data_dir / "dashboard.db").get_run(run_id).backend == "imported"


def test_a_finished_run_resumes_from_the_app_only_with_a_new_max_steps(client: Any) -> None:
    """Run detail's New max_steps: a completed run is refused without one (nothing launched, the run unchanged), a
    value not past the checkpoint is refused naming it, and a value that is not a whole number names the field."""
    store = Store(client.data_dir / "dashboard.db")
    run_dir = client.data_dir / "runs" / "done-4"
    (run_dir / "output" / "checkpoint-4").mkdir(parents=True)
    spec = yaml.safe_dump(smoke_dict(Path("/nonexistent/model"), max_steps=4, save_strategy="steps", save_steps=2))
    store.insert_run(
        Run(
            id="done-4",
            name="done-4",
            spec_yaml=spec,
            backend="local",
            status=RunStatus.COMPLETED.value,
            created_at=time.time(),
            run_dir=str(run_dir),
            output_dir=str(run_dir / "output"),
        )
    )
    with pytest.raises(Exception, match=r"reached max_steps 4.*New max_steps in Run detail"):
        client.predict("done-4", "4", None, api_name="/resume_run")
    with pytest.raises(Exception, match="max_steps 4 must be more than the checkpoint's step 4"):
        client.predict("done-4", "4", 4, api_name="/resume_run")
    for bad in (1e12, -3):  # (gradio rounds 2.5 to 2 first: precision=0)
        with pytest.raises(Exception, match=r"New max_steps|minimum"):
            client.predict("done-4", "4", bad, api_name="/resume_run")
    assert store.get_run("done-4").status == "completed" and not (run_dir / "run.yaml").exists()
