"""The dashboard process never imports the training stack: the app's build, `validate` and an HF Jobs launch run
without torch, trl, transformers, accelerate or peft (a Space installs requirements.txt only).

Each check runs in a fresh interpreter: once watching `sys.modules` (this venv has everything installed, so an
import that slips in shows), once with an import system that refuses those packages outright, as on a Space that
never installed them, serving the page and launching a run against the fake Hub."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from .conftest import REPO, free_port
from .fake_hub import FakeHub, Plan
from .hf_jobs_helpers import TOKEN, hf_spec, protocol_lines

HEAVY = ("torch", "trl", "transformers", "accelerate", "peft")

WATCH = """
import contextlib, io, json, sys
from grpo_dashboard.__main__ import main
from grpo_dashboard.ui import build_app

build_app(monitor=False)
codes = []
for path in sys.argv[1:]:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            codes.append(main(["validate", path]))
        except SystemExit as exc:
            codes.append(exc.code)
heavy = sorted({m.split(".")[0] for m in sys.modules} & {HEAVY})
print(json.dumps({"codes": codes, "heavy": heavy}))
"""

# A Space without the training stack: these packages cannot be imported at all.
REFUSE = """
import sys

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {HEAVY}:
            raise ModuleNotFoundError(f"No module named {name!r} (not installed on this Space)", name=name)
        return None

sys.meta_path.insert(0, Refuse())
"""

SPACE = (
    REFUSE
    + """
import json, time, urllib.request
from grpo_dashboard.launch.runs import validate
from grpo_dashboard.launch.runs import launch, load_spec, refresh
from grpo_dashboard.launch.backends import shared
from grpo_dashboard.store.db import TERMINAL, Store
from grpo_dashboard.ui import build_app

spec_path, port, token, repo = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
store = Store()
demo = build_app(store, monitor=False)
_, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
page = urllib.request.urlopen(url, timeout=60).read().decode()
config = json.loads(urllib.request.urlopen(url.rstrip("/") + "/config", timeout=60).read())
report = validate(load_spec(spec_path), repo)
run = launch(spec_path, store, base_dir=repo, token=token)
deadline = time.time() + 120
while time.time() < deadline:
    run = refresh(store, store.get_run(run.id))
    if run.status in TERMINAL and shared().hf_jobs.follower(run.id) is None:
        break
    time.sleep(0.2)
shared().stop()
demo.close()
print("@@" + json.dumps({"page": "GRPO Dashboard" in page, "title": config.get("title"),
                         "errors": [str(e) for e in report.errors], "status": run.status, "error": run.error,
                         "last_step": run.last_step, "backend": run.backend,
                         "heavy": sorted({m.split(".")[0] for m in sys.modules} & {HEAVY})}))
"""
)


def _script(text: str) -> str:
    return text.replace("{HEAVY}", repr(set(HEAVY)))


def _watched(script: str, tmp_path: Path, *args: str) -> Any:
    """What `script` (one of the watching scripts above) printed last as JSON, run in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", _script(script), *args],
        cwd=REPO,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPACE_ID", "SYSTEM")}
    return {
        **env,
        "PYTHONPATH": str(REPO),
        "GRPO_DASHBOARD_DATA_DIR": str(tmp_path / "data"),
        "HF_HUB_OFFLINE": "1",
        "GRPO_DASHBOARD_TRL_SCHEMA_DIR": str(tmp_path / "schemas"),
        **extra,
    }


def test_the_app_build_and_validate_import_no_training_stack(tmp_path: Path) -> None:
    hf = hf_spec(tmp_path)
    out = _watched(WATCH, tmp_path, str(REPO / "examples" / "smoke.yaml"), str(hf))
    assert out == {"codes": [0, 0], "heavy": []}, out


IMPORT_TRL = """
import contextlib, io, json, sys
from grpo_dashboard.__main__ import main

with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
    try:
        code = main(["import-trl", sys.argv[1], "-o", sys.argv[2]])
    except SystemExit as exc:
        code = exc.code
heavy = sorted({m.split(".")[0] for m in sys.modules} & {HEAVY})
print(json.dumps({"code": code, "heavy": heavy, "stderr": err.getvalue()[-2000:]}))
"""


def test_import_trl_runs_trls_parser_and_checks_outside_the_command(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "model_name_or_path: Qwen/Qwen2.5-0.5B\ndataset_name: a/b\nlearning_rate: 1.0e-6\n"
        "num_generations: 4\nper_device_train_batch_size: 3\nreward_funcs: [accuracy_reward]\n"
    )
    out = tmp_path / "spec.yaml"
    result = _watched(IMPORT_TRL, tmp_path, str(recipe), str(out))
    # TRL's own __post_init__ check ran (its refusal of this batch is reported) and the spec was written, yet the
    # command itself imported no trl
    assert result["code"] == 0 and result["heavy"] == [], result
    assert "generation_batch_size (3) must be divisible by num_generations (4)" in result["stderr"], result
    assert "learning_rate: 1.0e-06" in out.read_text()


INSPECT = """
import json, sys
from grpo_dashboard.checks.dataset_inspect import inspect_dataset

spec = {"name": "inspect", "model": {"name_or_path": sys.argv[1]}, "dataset": {"data_files": sys.argv[2]},
        "rewards": [{"name": "constant"}]}
report = inspect_dataset(spec, max_prompt_tokens=100)
heavy = sorted({m.split(".")[0] for m in sys.modules} & {HEAVY})
print(json.dumps({"tokens": report.prompt_tokens, "heavy": heavy}))
"""


def test_the_dataset_inspector_counts_with_the_models_tokenizer_in_a_child(tmp_path: Path, tiny_model: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in ("short", "x" * 300, "y" * 50)))
    out = _watched(INSPECT, tmp_path, str(tiny_model), str(data))
    # exact counts (the tiny tokenizer: one token per character), not the ~4-characters estimate, and no
    # transformers or torch in the inspecting process
    assert out["tokens"]["approximate"] is False and out["tokens"]["max"] == 300, out
    assert out["tokens"]["over"] == 1 and out["heavy"] == [], out


def test_a_space_without_the_training_stack_serves_validates_and_launches_hf_jobs(
    hub: FakeHub, tmp_path: Path
) -> None:
    hub.plans.append(Plan(lines=protocol_lines(4)))
    spec = hf_spec(tmp_path)
    env = _env(
        tmp_path,
        HF_HUB_OFFLINE="0",
        HF_ENDPOINT=hub.url,
        HF_TOKEN_PATH=str(tmp_path / "no-token"),
        GRPO_DASHBOARD_HF_POLL_S="0.2",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
    )
    env.pop("HF_TOKEN", None)
    # A real Space-like install runs it too: GRPO_DASHBOARD_SPACE_PYTHON=<venv with requirements.txt only>/bin/python
    python = os.environ.get("GRPO_DASHBOARD_SPACE_PYTHON") or sys.executable
    done = subprocess.run(
        [python, "-c", _script(SPACE), str(spec), str(free_port()), TOKEN, str(REPO)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    line = next((x for x in reversed(done.stdout.splitlines()) if x.startswith("@@")), None)
    assert done.returncode == 0 and line, done.stdout[-2000:] + done.stderr[-4000:]
    out = json.loads(line[2:])
    assert out["page"] and out["title"] == "GRPO Dashboard", out
    assert out["errors"] == [], out
    assert out["backend"] == "hf_jobs" and out["status"] == "completed", out
    assert out["last_step"] == 4 and out["heavy"] == [], out
    (create,) = hub.requests_to("POST", "/api/jobs/alice")  # the job the Space started, on the Hub's side
    assert json.loads(create.body)["flavor"] == "cpu-basic"
    assert hub.only_job().printed


def test_the_refusing_import_system_really_refuses(tmp_path: Path) -> None:
    """The Space stand-in above proves something only if it does keep trl and torch out."""
    probe = (
        _script(REFUSE) + "\nimport importlib\nfor name in {HEAVY}:\n"
        "    try:\n        importlib.import_module(name)\n    except ModuleNotFoundError:\n        continue\n"
        "    raise SystemExit('imported ' + name)\nprint('refused')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", _script(probe)], env=_env(tmp_path), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "refused", done.stdout + done.stderr
