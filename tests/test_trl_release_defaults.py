"""The per-release default tables and open-r1's rewards, checked against the sources they come from.

`TRL_DEFAULTS` and the version markers must equal what tools/trl_release_defaults.py derives from its extract of the
released TRL 0.14.0 / 0.16.0 / 0.18.0 wheels (tests/fixtures/trl_release_defaults.json, each wheel's sha256 noted;
with TRL_WHEELS=DIR holding the wheels the extract is rebuilt and compared too). open-r1's rewards are scored by the
job's real built-ins and compared with open-r1's own expressions (src/open_r1/rewards.py)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
from pathlib import Path

import pytest

from grpo_dashboard.errors import SpecError
from grpo_dashboard.spec import trl_keys
from grpo_dashboard.spec.jobfiles import rewards_module
from grpo_dashboard.spec.trl_fields import grpo_fields
from grpo_dashboard.spec.trl_import import import_trl
from grpo_dashboard.spec.trl_versions import LATEST, TRL_DEFAULTS, VERSION_MARKERS

from .conftest import REPO

EXTRACT = REPO / "tests" / "fixtures" / "trl_release_defaults.json"


def _tool():
    spec = importlib.util.spec_from_file_location("trl_release_defaults", REPO / "tools" / "trl_release_defaults.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def extract() -> dict:
    data = json.loads(EXTRACT.read_text())
    assert data["generated_by"] == "tools/trl_release_defaults.py"
    return data["releases"]


@pytest.fixture(scope="module")
def current() -> dict:
    return {name: f.default for name, f in grpo_fields().items()}


def test_extract_names_each_wheel_and_the_table_equals_what_the_releases_say(extract: dict, current: dict) -> None:
    tool = _tool()
    assert sorted(extract) == sorted(k for k in TRL_DEFAULTS if k != LATEST)
    for key, entry in extract.items():
        assert entry["version"] == f"{key}.0" and entry["wheel"] == f"trl-{key}.0-py3-none-any.whl"
        assert re.fullmatch(r"[0-9a-f]{64}", entry["sha256"])
        assert TRL_DEFAULTS[key] == tool.pins(entry, current), key
    # What the table holds, in the releases' own words: the drift the issue names, and what the wheels added to it.
    assert extract["0.18"]["grpo_config"]["loss_type"] == "bnpo" and extract["0.18"]["grpo_config"]["beta"] == 0.04
    assert extract["0.16"]["behaviour"]["loss_type"]["value"] == "bnpo"  # no field yet: token-level mean
    assert extract["0.14"]["behaviour"]["loss_type"]["value"] == "grpo"  # per-sequence mean
    assert extract["0.16"]["grpo_config"]["temperature"] == 0.9 and extract["0.16"]["grpo_config"]["top_k"] == 50


def test_every_field_a_release_had_is_a_version_marker_and_maps_somewhere(extract: dict, current: dict) -> None:
    tool = _tool()
    ours = dict(VERSION_MARKERS)
    for name, version in tool.markers(extract, current).items():
        assert ours.get(name) == version, name
        assert name in trl_keys.FOREIGN, name  # renamed, converted or dropped with a reason: never "unknown key"
    versions = [v for _, v in VERSION_MARKERS]
    assert versions == sorted(versions, key=lambda v: tuple(map(int, v.split("."))))  # oldest release wins


@pytest.mark.skipif(not os.environ.get("TRL_WHEELS"), reason="set TRL_WHEELS to a folder with the TRL wheels")
def test_extract_is_what_the_wheels_hold(extract: dict) -> None:
    tool = _tool()
    for entry in extract.values():
        assert tool.read_wheel(Path(os.environ["TRL_WHEELS"]) / entry["wheel"]) == entry


def test_trl_014_recipe_gets_its_defaults_and_its_batch_in_completions(tmp_path: Path) -> None:
    recipe = tmp_path / "old.yaml"
    recipe.write_text(
        "model_name_or_path: Qwen/Qwen2.5-0.5B\ndataset_name: a/b\nnum_generations: 4\n"
        "per_device_train_batch_size: 2\nreward_funcs: [accuracy_reward]\n"
    )
    result = import_trl(recipe, trl_version="0.14")
    t = result.spec.training
    assert (t["temperature"], t["beta"], t["loss_type"], t["gradient_accumulation_steps"]) == (0.9, 0.04, "grpo", 8)
    assert t["per_device_train_batch_size"] == 8  # 2 prompts × 4 completions
    assert "vllm_mode" not in t  # no vLLM in the recipe
    rows = {r.key: r for r in result.rows}
    assert (
        rows["(per_device_train_batch_size)"].action == "converted"
        and "2 × 4 = 8" in rows["(per_device_train_batch_size)"].note
    )
    t16 = import_trl(recipe, trl_version="0.16").spec.training
    assert (t16["temperature"], t16["top_k"], t16["loss_type"], t16["per_device_train_batch_size"]) == (
        0.9,
        50,
        "bnpo",
        2,
    )
    recipe.write_text(
        "model_name_or_path: Qwen/Qwen2.5-0.5B\ndataset_name: a/b\nuse_liger_loss: true\n"
        "wandb_log_unique_prompts: true\nvllm_guided_decoding_regex: '\\d+'\n"
        "reward_funcs: [accuracy_reward]\n"
    )
    result = import_trl(recipe)
    assert result.trl_version == "0.18"
    assert result.spec.training["log_unique_prompts"] is True
    assert result.spec.training["vllm_structured_outputs_regex"] == "\\d+"
    assert {r.key: r.action for r in result.rows}["use_liger_loss"] == "dropped"


def _score(spec_reward, texts: list[str], **columns) -> list[float]:
    fn = rewards_module().build_reward(
        spec_reward.name, spec_reward.builtin, spec_reward.function, dict(spec_reward.params)
    )
    return fn([[{"role": "assistant", "content": t}] for t in texts], **columns)


def test_open_r1_rewards_score_as_open_r1_does(tmp_path: Path) -> None:
    recipe = tmp_path / "or1.yaml"
    recipe.write_text(
        "model_name_or_path: Qwen/Qwen2.5-0.5B\ndataset_name: a/b\ncode_language: cpp\n"
        "reward_funcs: [format, reasoning_steps, code_format, cosine, repetition_penalty, "
        "soft_overlong_punishment]\nrepetition_n_grams: 2\n"
    )
    result = import_trl(recipe)
    r = {x.name: x for x in result.spec.rewards}
    fmt = r"^<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>$"  # open-r1's format_reward
    texts = [
        "<think>\nx\n</think>\n<answer>\n4\n</answer>",
        "<think>\nx\n</think>\n<answer>\n4\n</answer>\n",
        "<think>\nx\n</think>\n<answer>\n4\n</answer>\ntrailing",
        "no tags",
        " <think>\nx\n</think>\n<answer>\n4\n</answer>",
    ]
    assert (
        _score(r["format"], texts)
        == [1.0 if re.match(fmt, t, re.DOTALL | re.MULTILINE) else 0.0 for t in texts]
        == [1.0, 1.0, 1.0, 0.0, 0.0]
    )
    steps = ["Step 1: a", "First, a. Second, b. Next, c. Finally, d.", "nothing"]
    assert _score(r["reasoning_steps"], steps) == [pytest.approx(1 / 3), 1.0, 0.0]
    code = [
        "<think>\nx\n</think>\n<answer>\n```cpp\nint main(){}\n```\n</answer>",
        "<think>\nx\n</think>\n<answer>\n```python\nprint(1)\n```\n</answer>",
    ]
    assert _score(r["code_format"], code) == [1.0, 0.0]  # code_language reached code_format, not another reward
    assert r["cosine"].params == {
        "min_value_wrong": 0.0,
        "max_value_wrong": -0.5,
        "min_value_correct": 0.5,
        "max_value_correct": 1.0,
        "max_len": 1000,
        "unit": "chars",
    }
    wrong = _score(r["cosine"], ["\\boxed{5}" + " " * 491], solution=["$4$"])[0]
    assert wrong == pytest.approx(-0.5 + 0.5 * 0.5 * (1 + math.cos(math.pi * 500 / 1000)))  # open-r1's formula
    assert r["repetition_penalty"].params == {"ngram_size": 2, "max_penalty": -1.0, "unit": "words"}
    assert _score(r["repetition_penalty"], ["a b a b a b"]) == [pytest.approx((1 - 2 / 5) * -1.0)]
    assert r["soft_overlong_punishment"].params == {"max_completion_len": 16384, "soft_punish_cache": 4096}
    recipe.write_text(
        "model_name_or_path: Qwen/Qwen2.5-0.5B\ndataset_name: a/b\ncode_language: rust\nreward_funcs: [code_format]\n"
    )
    with pytest.raises(SpecError) as exc:
        import_trl(recipe)
    assert "code_language" in str(exc.value) and "'rust'" in str(exc.value) and "cpp" in str(exc.value)


def test_open_r1_dataset_mixture_becomes_trls_mixture_and_says_what_differs(tmp_path: Path) -> None:
    recipe = tmp_path / "mix.yaml"
    recipe.write_text(
        "model_name_or_path: Qwen/Qwen2.5-0.5B\nreward_funcs: [accuracy]\ndataset_mixture:\n"
        "  datasets:\n    - {id: owner/math, config: hard, columns: [problem, solution], weight: 0.5}\n"
        "    - {id: owner/code, split: validation}\n  seed: 42\n  test_split_size: 0.1\n"
    )
    result = import_trl(recipe)
    d = result.spec.dataset
    assert d.mixture == [
        {"path": "owner/math", "name": "hard", "columns": ["problem", "solution"]},
        {"path": "owner/code", "split": "validation"},
    ]
    assert d.test_split_size == 0.1 and d.path is None
    note = {r.key: r for r in result.rows}["dataset_mixture"].note
    assert "[0.5, None]" in note and "fraction" in note and "seed 42" in note
    from grpo_dashboard.spec.trl_export import export_trl

    export = export_trl(result.spec, tmp_path / "out.yaml")
    (tmp_path / "out.yaml").write_text(export.yaml_text)
    if export.rewards_module:
        (tmp_path / f"{export.rewards_module_name}.py").write_text(export.rewards_module)
    assert import_trl(tmp_path / "out.yaml").spec == result.spec  # TRL's own `datasets` key on the way back
    recipe.write_text(
        "model_name_or_path: Qwen/Qwen2.5-0.5B\nreward_funcs: [accuracy]\ndataset_mixture: {datasets: [{config: x}]}\n"
    )
    with pytest.raises(SpecError) as exc:
        import_trl(recipe)
    assert "dataset_mixture" in str(exc.value) and "`id`" in str(exc.value)


def test_trls_own_reward_names_are_the_grpo_scripts_registry() -> None:
    import ast

    import trl

    from grpo_dashboard.spec.trl_rewards import TRL_REWARDS

    source = (Path(trl.__file__).parent / "scripts" / "grpo.py").read_text()
    registry = next(
        n.value
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "reward_funcs_registry" for t in n.targets)
    )
    names = {ast.literal_eval(k): v for k, v in zip(registry.keys, registry.values, strict=True)}
    assert set(names) == set(TRL_REWARDS)
    overlong = {k.arg: ast.literal_eval(k.value) for k in names["get_soft_overlong_punishment"].keywords}
    assert overlong == TRL_REWARDS["get_soft_overlong_punishment"][1]


def test_an_open_r1_recipe_without_a_system_prompt_still_sends_chat_prompts(tmp_path: Path) -> None:
    recipe = tmp_path / "or1.yaml"
    recipe.write_text(
        "model_name_or_path: Qwen/Qwen2.5-0.5B\ndataset_name: a/b\ndataset_prompt_column: problem\n"
        "reward_funcs: [accuracy, format]\n"
    )
    result = import_trl(recipe)
    assert result.spec.dataset.conversational and result.spec.dataset.prompt_column == "problem"
    assert {r.key: r.action for r in result.rows}["(conversational)"] == "converted"
    recipe.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\ndataset_name: a/b\nreward_funcs: [accuracy_reward]\n")
    assert not import_trl(recipe).spec.dataset.conversational  # TRL's own script takes the prompt column as it is
