"""Jobs that work like local: the submitted job installs what the spec turns on (trackers, DeepSpeed, ...), named
secrets travel as job secrets and nowhere else, samples come back with the log; a local launch checks the same
packages first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from grpo_dashboard.errors import SpecError
from grpo_dashboard.launch.runs import launch
from grpo_dashboard.spec.job_deps import job_deps
from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.store.db import Store, data_dir
from grpo_dashboard.views.completions import read_step, sample_steps

from .conftest import REPO, smoke_dict, write_spec
from .fake_hub import FakeHub, Plan
from .hf_jobs_helpers import TOKEN, follow_until_done, hf_spec, protocol_lines

SAMPLE = "@@GRPO_DASHBOARD_SAMPLE@@ "


def _spec(tmp_path: Path, training: dict[str, Any], **backend: Any) -> Path:
    path = hf_spec(tmp_path, **backend)
    data = yaml.safe_load(path.read_text())
    data["training"].update(training)
    return write_spec(path, data)


def _with(command: list[str]) -> list[str]:
    return [command[i + 1] for i, part in enumerate(command) if part == "--with"]


def test_a_trackio_zero_jobs_run_gets_its_packages_and_named_secrets(
    hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "wandb-secret-value-123")
    hub.plans.append(Plan(lines=protocol_lines(3)))
    spec = _spec(
        tmp_path,
        {"report_to": ["trackio", "wandb"], "use_liger_kernel": True},
        accelerate_config="zero2",
        secrets=["WANDB_API_KEY"],
        env={"WANDB_PROJECT": "grpo"},
    )
    store = Store()
    run = launch(spec, store, base_dir=REPO, token=TOKEN)
    run = follow_until_done(store, run.id)
    assert run.status == "completed", run.error
    (create,) = hub.requests_to("POST", "/api/jobs/alice")
    body = json.loads(create.body)
    packages = _with(body["command"])
    assert {"trackio", "wandb", "deepspeed", "liger-kernel"} <= set(packages), packages
    assert "accelerate" in body["command"] and "--config_file" in body["command"]
    assert body["secrets"] == {"HF_TOKEN": TOKEN, "WANDB_API_KEY": "wandb-secret-value-123"}
    assert body["environment"]["WANDB_PROJECT"] == "grpo"
    for path in data_dir().rglob("*"):  # the secret's value is sent, never stored
        if path.is_file():
            assert b"wandb-secret-value-123" not in path.read_bytes(), path
    assert "WANDB_API_KEY" in json.dumps(run.spec_yaml)  # its name is


def test_a_named_secret_missing_at_launch_is_refused_before_anything_is_written(hub: FakeHub, tmp_path: Path) -> None:
    spec = _spec(tmp_path, {}, secrets=["WANDB_API_KEY"])
    with pytest.raises(SpecError, match=r"backend.secrets\[0\].*export WANDB_API_KEY"):
        launch(spec, Store(), base_dir=REPO, token=TOKEN)
    assert not hub.requests_to("POST", "/api/jobs/alice") and not (data_dir() / "runs").exists()


def test_samples_of_a_remote_run_appear_in_its_completions_view(hub: FakeHub, tmp_path: Path) -> None:
    lines = protocol_lines(4, noise=False)
    rows = [
        {
            "step": s,
            "prompt": f"p{s}",
            "completion": f"aaa{s}",
            "rewards": {"letter_fraction": 0.75},
            "advantage": 0.1 * s,
        }
        for s in (1, 2, 3, 4)
    ]
    lines[-1:-1] = [SAMPLE + json.dumps(r) for r in rows]
    hub.plans.append(Plan(lines=lines))
    store = Store()
    run = launch(hf_spec(tmp_path), store, base_dir=REPO, token=TOKEN)
    run = follow_until_done(store, run.id)
    assert run.status == "completed" and run.n_skipped == 0
    assert sample_steps(run.run_dir) == [1, 2, 3, 4]
    assert read_step(run.run_dir, 3)[0]["completion"] == "aaa3"
    assert SAMPLE.strip() not in (Path(run.run_dir) / "job.log").read_text()


def test_local_launch_checks_the_optional_packages_the_spec_needs(tiny_model: Path, tmp_path: Path) -> None:
    spec = smoke_dict(tiny_model, report_to="tensorboard")
    spec["model"]["lora"] = {"r": 4}
    spec["backend"]["accelerate_config"] = "zero2"
    missing = {d.pip for d in job_deps(RunSpec.from_dict(spec)) if not d.installed}
    assert missing, "this check needs a package that is not installed here"
    with pytest.raises(SpecError) as exc:
        launch(write_spec(tmp_path / "s.yaml", spec), Store(), base_dir=REPO)
    text = str(exc.value)
    assert all(f"'{pip}'" in text for pip in missing) and "pip install" in text
    assert not (data_dir() / "runs").exists()
    if "peft" in missing:  # the section is shown with what it sets, not as a placeholder
        assert "model.lora = {'r': 4}" in text and "(set)" not in text, text


@pytest.mark.training
def test_what_a_recipe_sets_trains_mixture_reward_model_chat_template_init_kwargs(
    tiny_model: Path, tmp_path: Path
) -> None:
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForSequenceClassification

    from grpo_dashboard.launch.runs import wait

    config = Qwen2Config.from_pretrained(tiny_model)
    config.num_labels = 1
    rm_dir = tmp_path / "tiny-rm"
    Qwen2ForSequenceClassification(config).save_pretrained(rm_dir)
    AutoTokenizer.from_pretrained(tiny_model).save_pretrained(rm_dir)
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    rows = (REPO / "examples" / "data" / "smoke.jsonl").read_text().splitlines()
    first.write_text("\n".join(rows[:32]) + "\n")
    second.write_text("\n".join(rows[32:]) + "\n")
    spec = smoke_dict(tiny_model, max_steps=2, model_init_kwargs={"attn_implementation": "eager"})
    del spec["dataset"]["data_files"]
    spec["dataset"].update(
        mixture=[{"path": "json", "data_files": str(first)}, {"path": "json", "data_files": str(second)}],
        system_prompt="be brief",
    )
    spec["model"]["chat_template"] = (
        "{% for m in messages %}[[{{ m['role'] }}: {{ m['content'] }}]]{% endfor %}"
        "{% if add_generation_prompt %}[[assistant: {% endif %}"
    )
    spec["rewards"].append({"name": "rm", "model": str(rm_dir), "weight": 0.5})
    store = Store()
    run = wait(store, launch(write_spec(tmp_path / "s.yaml", spec), store, base_dir=REPO))
    assert run.status == "completed", (run.error, (Path(run.run_dir) / "job.log").read_text()[-3000:])
    latest = store.latest_metrics(run.id)
    assert "rewards/rm/mean" in latest and "rewards/letter_fraction/mean" in latest  # the reward model scored
    assert read_step(run.run_dir, sample_steps(run.run_dir)[-1])[0]["rewards"]["rm"] is not None
    out = Path(run.output_dir)  # the tokenizer saved with the model carries the override
    saved = "".join(f.read_text() for f in (out / "chat_template.jinja", out / "tokenizer_config.json") if f.is_file())
    assert "[[assistant: " in saved
