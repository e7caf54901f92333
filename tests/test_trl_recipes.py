"""TRL recipes in and out: every published recipe of ../shared/realdata/recipes imports (TRL's own parser) with a
mapping table and validates offline, exports to a flat config TRL's parser accepts, and round-trips; bad recipes
are refused with the key or path named and nothing written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_dashboard.errors import SpecError
from grpo_dashboard.launch.runs import validate
from grpo_dashboard.spec import trl_keys
from grpo_dashboard.spec.run_spec import LoraSpec, QuantizationSpec, RewardSpec, RunSpec, world_size
from grpo_dashboard.spec.trl_export import export_trl
from grpo_dashboard.spec.trl_import import import_trl
from grpo_dashboard.spec.trl_parse import parse_with_trl, read_config, trl_check

from .conftest import REPO, SMOKE_DATA

RECIPES = REPO.parent / "shared" / "realdata" / "recipes"
if not RECIPES.is_dir():
    RECIPES = Path("/work/shared/realdata/recipes")
ALL = sorted(RECIPES.glob("*.yaml")) if RECIPES.is_dir() else []
needs_recipes = pytest.mark.skipif(not ALL, reason="the published recipes (shared/realdata/recipes) are not here")


def _fills(path: Path) -> dict[str, object]:
    """What a recipe that names no model, dataset or reward needs (its header comment says what its source used)."""
    text = path.read_text(encoding="utf-8")
    config, _ = read_config(path)
    out: dict[str, object] = {}
    used = re.search(r"we use (\S+) \+ (\S+)", text)
    if "model_name_or_path" not in config:
        out["model"] = used.group(1) if used else "Qwen/Qwen2.5-0.5B-Instruct"
    if not {"dataset_name", "dataset_id_or_path", "datasets"} & set(config):
        out["dataset"] = used.group(2) if used else "trl-lib/DeepMath-103K"
    rewards = re.search(r"reward_funcs=\[([a-z_, ]+)\]", text)
    if "reward_funcs" not in config:
        names = [n.strip() for n in rewards.group(1).split(",")] if rewards else ["accuracy_reward"]
        out["rewards"] = [n for n in names if n in ("think_format_reward", "accuracy_reward")] or ["accuracy_reward"]
    return out


def _export_to(tmp_path: Path, spec: RunSpec) -> Path:
    out = tmp_path / "recipe.yaml"
    export = export_trl(spec, out)
    out.write_text(export.yaml_text, encoding="utf-8")
    if export.rewards_module:
        (tmp_path / f"{export.rewards_module_name}.py").write_text(export.rewards_module, encoding="utf-8")
    return out


@needs_recipes
@pytest.mark.parametrize("recipe", ALL, ids=[p.stem for p in ALL])
def test_every_published_recipe_imports_validates_exports_and_round_trips(recipe: Path, tmp_path: Path) -> None:
    result = import_trl(recipe, overrides=_fills(recipe))  # every weighted reward reproduced: nothing dropped
    config, _ = read_config(recipe)
    table = {r.key for r in result.rows}
    assert set(config) <= table, set(config) - table  # every key of the file has its row
    assert all(r.action in ("mapped", "converted", "pinned", "dropped", "unsupported") for r in result.rows)
    assert not result.missing()  # _fills gave what the recipe lacks
    report = validate(result.spec)
    if result.spec.model.quantization is not None:  # QLoRA needs a CUDA GPU: refused here, valid on the stated T4
        quant = [e for e in report.errors if e.field == "model.quantization"]
        assert quant and "CUDA GPU" in quant[0].message
        gpu = RunSpec.from_dict(
            {**result.spec.to_dict(), "backend": {"kind": "hf_jobs", "flavor": "t4-small", "namespace": "alice"}}
        )
        report = validate(gpu)
    # This CPU machine lacks what the recipes' GPU machines have: the packages they use (peft, flash-attn, deepspeed)
    # and the GPUs for a vLLM server. Those facts of the machine, and only those, are errors here.
    machine = [
        e
        for e in report.errors
        if ("package" in e.message and "not installed here" in e.message) or "this machine shows 0" in e.message
    ]
    assert len(machine) == len(report.errors), [str(e) for e in report.errors if e not in machine]
    if result.spec.training.get("use_vllm") and result.spec.training.get("vllm_mode") == "server":
        assert result.spec.generation is not None and result.spec.generation.server_gpus  # the backend serves
    if result.spec.dataset.path:  # offline: the Hub check says it could not look, and does not fail
        assert any("could not be inspected here" in w.message for w in report.warnings)

    exported = _export_to(tmp_path, result.spec)
    flat, header = read_config(exported)
    values, unknown, _ = parse_with_trl(flat)
    assert set(unknown) <= set(trl_keys.LAUNCH_KEYS), unknown  # all else is a key of TRL's grpo parser
    # TRL's GRPOConfig/ModelConfig accept it at the process count the export launches (its batch checks need it).
    assert trl_check(flat, unknown, world_size=world_size(result.spec)) is None
    dropped = {r.key for r in result.rows if r.action in ("dropped", "unsupported")}
    trl_known = {k for k in config if k not in dropped and k in values}
    assert {k for k in trl_known if k not in ("reward_funcs", "reward_weights", "use_peft")} <= set(flat) | {
        "model_revision",
        "lora_target_modules",
    }
    back = import_trl(exported)
    assert back.spec == result.spec


def test_trls_own_check_counts_the_process_count_it_is_given() -> None:
    """Groups of 8 from 4 prompts a device fit two processes, not one: TRL's batch check sees the count given."""
    flat = {"model_name_or_path": "m", "per_device_train_batch_size": 4, "num_generations": 8}
    assert "divisible" in (trl_check(flat, [], world_size=1) or "")
    assert trl_check(flat, [], world_size=2) is None
    assert "divisible" in (trl_check(flat, []) or "")  # this process alone, and the property is restored


@needs_recipes
def test_open_r1_recipe_mapping_drift_and_conversions() -> None:
    result = import_trl(RECIPES / "01_or1_distill15b_demo.yaml")
    rows = {r.key: r for r in result.rows}
    t = result.spec.training
    assert result.trl_version == "0.18" and "max_prompt_length" in result.version_reason
    assert (t["beta"], t["loss_type"], t["vllm_mode"]) == (0.04, "bnpo", "server")
    assert rows["(beta)"].action == "pinned" and "1.16's is 0.0" in rows["(beta)"].note
    assert rows["torch_dtype"].action == "converted" and result.spec.model.dtype == "bfloat16"
    assert rows["warmup_ratio"].target == "training.warmup_steps" and t["warmup_steps"] == 0.1
    assert rows["max_prompt_length"].action == "dropped" and "max_prompt_length" not in t
    assert result.spec.model.chat_template.startswith("{% if not add_generation_prompt")
    assert [(r.name, r.builtin, r.weight) for r in result.spec.rewards] == [
        ("accuracy", "math_accuracy", 1.0),
        ("format", "regex", 1.0),
        ("tag_count", "python", 1.0),
    ]
    pinned_latest = import_trl(RECIPES / "01_or1_distill15b_demo.yaml", trl_version="1.16")
    assert "beta" not in pinned_latest.spec.training


@needs_recipes
def test_vllm_device_becomes_server_mode_and_batches_pick_the_process_count() -> None:
    r4 = import_trl(RECIPES / "04_or1_coder7b_codeforces.yaml")
    assert r4.spec.training["vllm_mode"] == "server" and r4.trl_version == "0.16"
    assert {r.key: r.action for r in r4.rows}["callbacks"] == "unsupported"
    assert [(r.name, r.builtin, r.weight) for r in r4.spec.rewards] == [
        ("cf_code", "open_r1_cf_code", 1.0),
        ("code_format", "regex", 0.1),
    ]
    assert r4.spec.backend.env == {"WANDB_ENTITY": "huggingface", "WANDB_PROJECT": "open-r1"}
    r3 = import_trl(RECIPES / "03_or1_qwen15b_code.yaml")
    assert r3.spec.backend.num_processes == 7  # 16 × 7 × 4 completions are whole groups of 14
    assert "divisible by num_generations (14)" in r3.trl_check
    r6 = import_trl(RECIPES / "06_trl_cli_polaris.yaml")
    assert (r6.spec.backend.num_processes, r6.spec.backend.accelerate_config) == (4, "zero2")


def test_unknown_key_and_unimportable_dotted_reward_are_named_and_nothing_is_written(tmp_path: Path) -> None:
    recipe = tmp_path / "bad.yaml"
    recipe.write_text(
        "model_name_or_path: Qwen/Qwen2.5-0.5B\ndataset_name: a/b\nlearning_rat: 1e-6\n"
        "reward_funcs: [accuracy_reward]\n"
    )
    with pytest.raises(SpecError) as exc:
        import_trl(recipe, strict=True)
    text = str(exc.value)
    assert "learning_rat" in text and "'learning_rate'" in text and "nothing was written" in text
    assert "without --strict" in text
    (row,) = [r for r in import_trl(recipe).rows if r.key == "learning_rat"]  # as `trl grpo`: ignored, and said
    assert row.action == "ignored" and "'learning_rate'" in row.note
    recipe.write_text(
        "model_name_or_path: Qwen/Qwen2.5-0.5B\ndataset_name: a/b\nreward_funcs: [my_lib.rewards.custom_reward]\n"
    )
    with pytest.raises(SpecError) as exc:
        import_trl(recipe)
    assert "my_lib.rewards.custom_reward" in str(exc.value) and "does not import" in str(exc.value)
    out = tmp_path / "spec.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_dashboard", "import-trl", str(recipe), "-o", str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 1 and "does not import" in proc.stderr and not out.exists()
    (tmp_path / "my_lib").mkdir()
    (tmp_path / "my_lib" / "rewards.py").write_text("def custom_reward(completions, **kw):\n    return [0.0]\n")
    result = import_trl(recipe)
    assert result.spec.rewards[0].function == f"{(tmp_path / 'my_lib' / 'rewards.py').resolve()}:custom_reward"


def test_each_kind_of_reward_name_gets_its_row_and_an_unknown_one_an_error_naming_it(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "model_name_or_path: Qwen/Qwen2.5-0.5B\ndataset_name: a/b\n"
        "reward_funcs: [accuracy_reward, format, letter_fraction]\n"
    )
    result = import_trl(recipe)
    rows = {r.value: (r.action, r.target, r.note) for r in result.rows if r.key == "reward_funcs"}
    assert rows["accuracy_reward"] == (
        "converted",
        "rewards[accuracy_reward]",
        "TRL's accuracy_reward is the trl_accuracy built-in",
    )
    assert rows["format"][:2] == ("converted", "rewards[format]") and "open-r1's 'format'" in rows["format"][2]
    assert rows["letter_fraction"] == ("mapped", "rewards[letter_fraction]", "a built-in of this dashboard")
    assert [r.name for r in result.spec.rewards] == ["accuracy_reward", "format", "letter_fraction"]
    recipe.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\ndataset_name: a/b\nreward_funcs: [no_such_reward]\n")
    with pytest.raises(SpecError) as exc:
        import_trl(recipe)
    (error,) = exc.value.errors
    assert (error.field, error.value) == ("reward_funcs", "no_such_reward")
    assert "neither one of TRL's rewards" in error.message and "nothing was written" in error.message


def test_validate_recognises_a_flat_trl_file_and_hints_point_at_the_right_section(tmp_path: Path) -> None:
    flat = tmp_path / "flat.yaml"
    flat.write_text(
        "model_name_or_path: Qwen/Qwen2.5-0.5B\ntorch_dtype: bfloat16\nuse_peft: true\nlora_r: 8\n"
        "dataset_name: a/b\nvllm_mode: colocate\nlearning_rate: 1.0e-6\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_dashboard", "validate", str(flat)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 1 and "import-trl" in proc.stderr and proc.stderr.count(" - ") == 1
    with pytest.raises(SpecError) as exc:
        RunSpec.from_dict(
            {
                "name": "x",
                "model": {"name_or_path": "a/b", "torch_dtype": "bfloat16"},
                "lora_r": 8,
                "vllm_mode": "server",
            }
        )
    text = str(exc.value)
    assert "`model.dtype`" in text and "`model.lora.r`" in text and "training.vllm_mode" in text
    assert "Did you mean" not in text  # not torch_compile, local_rank or save_model


def test_everything_a_recipe_sets_is_expressible_and_round_trips(tmp_path: Path) -> None:
    spec = RunSpec(name="full", training={"model_init_kwargs": {"use_kernels": True}, "beta": 0.02, "max_steps": 5})
    spec.model.name_or_path = "Qwen/Qwen2.5-0.5B-Instruct"
    spec.model.lora = LoraSpec(
        r=8, use_rslora=True, use_dora=True, modules_to_save=["lm_head"], target_parameters=["mlp.experts.down_proj"]
    )
    spec.model.quantization = QuantizationSpec(bits=4, quant_type="fp4", double_quant=True)
    spec.model.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    spec.dataset.mixture = [{"path": "a/b", "fraction": 0.7}, {"path": "c/d", "name": "x", "fraction": 0.3}]
    spec.dataset.test_split_size = 0.1
    spec.rewards = [
        RewardSpec(name="rm", model="OpenAssistant/reward-model-deberta-v3-large-v2"),
        RewardSpec(name="accuracy_reward", builtin="trl_accuracy"),
        RewardSpec(name="len", builtin="target_length", params={"target": 64}, weight=0.5),
    ]
    spec.backend.env = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    spec.backend.secrets = ["WANDB_API_KEY"]
    spec.tags, spec.group = ["qlora", "ablation"], "sweep-1"
    exported = _export_to(tmp_path, spec)
    flat, _ = read_config(exported)
    assert flat["reward_model_name_or_path"] == spec.rewards[0].model
    assert flat["reward_funcs"] == ["accuracy_reward", "recipe_rewards.len"] and flat["load_in_4bit"] is True
    # The rewards module imports from any directory: `trl grpo` puts the recipe's folder on PYTHONPATH.
    assert flat["env"] == {**spec.backend.env, "PYTHONPATH": str(tmp_path)} and "WANDB_API_KEY" not in flat
    assert parse_with_trl(flat)[1] == []
    assert import_trl(exported).spec == spec
    report = validate(spec)
    errors = {e.field for e in report.errors}
    assert "model.quantization" in errors  # no GPU here: QLoRA is refused, with what to do
    assert any("CUDA GPU" in e.message for e in report.errors)


def test_smoke_spec_round_trips_through_trl_keys(tmp_path: Path) -> None:
    spec = RunSpec.from_file(REPO / "examples" / "smoke.yaml")
    spec.dataset.data_files = str(SMOKE_DATA)
    exported = _export_to(tmp_path, spec)
    flat, _ = read_config(exported)
    assert flat["datasets"] == [{"path": "json", "data_files": str(SMOKE_DATA)}]
    assert flat["reward_funcs"] == ["recipe_rewards.letter_fraction"]
    module = (tmp_path / "recipe_rewards.py").read_text()
    proc = subprocess.run(
        [sys.executable, "-c", "import recipe_rewards as m; print(m.letter_fraction(['aab']))"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "[0.6666666666666666]", proc.stderr + module
    assert import_trl(exported).spec == spec


def test_structural_errors_no_longer_stop_the_other_checks(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: x\nmodel: {name_or_path: a/b, torch_dtype: bfloat16}\n"
        "dataset: {data_files: missing.jsonl}\nrewards: [{name: nope_reward}]\n"
        "training: {num_generations: 1}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_dashboard", "validate", str(spec)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 1
    fields = [line.split(" = ")[0] for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert fields == [
        "error: model.torch_dtype",
        "error: dataset.data_files",
        "error: rewards[0].name",
        "error: training.num_generations",
    ], proc.stderr


def test_reward_model_and_weights_follow_trls_order(tmp_path: Path) -> None:
    recipe = tmp_path / "rm.yaml"
    recipe.write_text(
        "model_name_or_path: Qwen/Qwen2.5-0.5B\ndataset_name: a/b\nreward_model_name_or_path: owner/rm\n"
        "reward_funcs: [accuracy_reward, ioi_code, think_format_reward]\n"
        "reward_weights: [0.3, 1.0, 2.0, 0.5]\n"
    )
    with pytest.raises(SpecError, match="'ioi_code': is a reward of weight 2.0"):  # its own weight, after the RM's
        import_trl(recipe)
    result = import_trl(recipe, allow_drop=True)
    assert [(r.name, r.weight, r.model) for r in result.spec.rewards] == [
        ("rm", 0.3, "owner/rm"),
        ("accuracy_reward", 1.0, None),
        ("think_format_reward", 0.5, None),
    ]
    assert {r.key: r.action for r in result.rows if r.value == "ioi_code"} == {"reward_funcs": "dropped"}
    exported = _export_to(tmp_path / "out", result.spec) if (tmp_path / "out").mkdir() is None else None
    flat, _ = read_config(exported)
    assert flat["reward_model_name_or_path"] == "owner/rm" and flat["reward_weights"] == [0.3, 1.0, 0.5]
