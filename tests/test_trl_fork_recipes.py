"""Recipes of open-r1 forks import on the first try: anchors and merge keys (within the expansion budget), the fork's
own script arguments ignored as `trl grpo` ignores them (all listed at once; --strict refuses them all in one error),
open-r1's code rewards kept as the sandboxed `open_r1_code` built-in, a weighted reward that cannot be reproduced
refused by name (or dropped with --allow-drop), and a summary line that says what was kept and what is missing.

The three recipes in tests/fixtures/fork_recipes are PROJECT-WRITTEN in the style of open-r1 forks (no fork published
them); the published ones are in ../shared/realdata/recipes (tests/test_trl_recipes.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_dashboard.errors import SpecError
from grpo_dashboard.launch.runs import validate
from grpo_dashboard.spec import safe_yaml, trl_keys
from grpo_dashboard.spec.jobfiles import rewards_module
from grpo_dashboard.spec.run_spec import world_size
from grpo_dashboard.spec.trl_export import export_trl
from grpo_dashboard.spec.trl_import import import_trl
from grpo_dashboard.spec.trl_parse import parse_with_trl, read_config, trl_check

from .conftest import REPO
from .test_trl_recipes import ALL, needs_recipes
from .test_yaml_limits import BOMB, LOADERS

FORKS = REPO / "tests" / "fixtures" / "fork_recipes"
FORK_RECIPES = sorted(FORKS.glob("*.yaml"))
FORK_KEYS = {
    "fork_code_anchors": {"eval_system_prompt", "max_test_cases_per_problem", "filter_by_difficulty"},
    "fork_math_merge_keys": {
        "_defaults",
        "curriculum_schedule",
        "curriculum_difficulty_column",
        "curriculum_warmup_steps",
    },
    "fork_binary_code": {"eval_reward_funcs", "sandbox_backend", "dump_rollouts_every"},
}
REWARDS = {
    "fork_code_anchors": [("code", "open_r1_code", 1.0), ("format", "regex", 0.1)],
    "fork_math_merge_keys": [
        ("accuracy", "math_accuracy", 1.0),
        ("format", "regex", 0.5),
        ("tag_count", "python", 0.5),
    ],
    "fork_binary_code": [("binary_code", "open_r1_code", 1.0), ("code_format", "regex", 0.2)],
}
ENV = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "grpo_dashboard", *args], capture_output=True, text=True, cwd=cwd, timeout=180, env=ENV
    )


def test_the_fork_recipes_are_all_here_and_say_they_are_project_written() -> None:
    assert [p.stem for p in FORK_RECIPES] == sorted(FORK_KEYS)
    for path in FORK_RECIPES:
        assert path.read_text(encoding="utf-8").startswith("# PROJECT-WRITTEN test recipe")


@pytest.mark.parametrize("recipe", FORK_RECIPES, ids=[p.stem for p in FORK_RECIPES])
def test_fork_recipes_import_first_try_validate_and_export_for_trls_parser(recipe: Path, tmp_path: Path) -> None:
    result = import_trl(recipe)
    rows = {r.key: r for r in result.rows}
    config, _ = read_config(recipe)
    assert set(config) <= set(rows)  # every key has its row, the ignored ones included
    assert {k for k, r in rows.items() if r.action == "ignored"} == FORK_KEYS[recipe.stem]
    assert all("`trl grpo` ignores it too" in rows[k].note for k in FORK_KEYS[recipe.stem])
    assert [(r.name, r.builtin, r.weight) for r in result.spec.rewards] == REWARDS[recipe.stem]
    assert not result.missing()
    assert f"{len(FORK_KEYS[recipe.stem])} unknown)" in result.summary()
    report = validate(result.spec)
    assert not report.errors, [str(e) for e in report.errors]
    out = tmp_path / "recipe.yaml"
    export = export_trl(result.spec, out)
    out.write_text(export.yaml_text, encoding="utf-8")
    flat, _ = read_config(out)
    _, unknown, check = parse_with_trl(flat)
    assert set(unknown) <= set(trl_keys.LAUNCH_KEYS), unknown
    assert check is None, check
    assert trl_check(flat, unknown, world_size=world_size(result.spec)) is None  # at the count it launches with


def test_anchors_resolve_to_the_values_trl_reads() -> None:
    code = import_trl(FORKS / "fork_code_anchors.yaml").spec
    assert code.training["learning_rate"] == 2.0e-06 and code.training["lr_scheduler_kwargs"] == {"min_lr": 2.0e-06}
    assert code.training["gradient_checkpointing_kwargs"] == {"use_reentrant": False}
    assert code.dataset.system_prompt and code.dataset.system_prompt.startswith("You are a careful Python")
    math = import_trl(FORKS / "fork_math_merge_keys.yaml").spec
    assert math.training["lr_scheduler_kwargs"] == {"learning_rate": 1.0e-06, "warmup_ratio": 0.05}  # `<<: *base`


def test_strict_refuses_every_unknown_key_in_one_error() -> None:
    with pytest.raises(SpecError) as info:
        import_trl(FORKS / "fork_binary_code.yaml", strict=True)
    fields = [e.field for e in info.value.errors]
    assert sorted(fields) == sorted(FORK_KEYS["fork_binary_code"])
    assert all("without --strict" in e.message and "nothing was written" in e.message for e in info.value.errors)


def test_cli_import_prints_the_table_once_and_ends_with_the_summary(tmp_path: Path) -> None:
    out = tmp_path / "spec.yaml"
    proc = _cli("import-trl", str(FORKS / "fork_code_anchors.yaml"), "-o", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[-1] == "import: 23 kept, 5 converted, 2 pinned, 4 dropped (1 unsupported, 3 unknown).", lines[-1]
    assert sum(" ignored " in line for line in lines) == 3 and out.is_file()
    proc = _cli("import-trl", str(FORKS / "fork_code_anchors.yaml"), "--strict", "-o", "x.yaml", cwd=tmp_path)
    assert proc.returncode == 1 and all(k in proc.stderr for k in FORK_KEYS["fork_code_anchors"])
    assert not out.with_name("x.yaml").exists()


def test_a_recipe_without_model_dataset_or_reward_says_so_and_validate_gives_the_same_hint(tmp_path: Path) -> None:
    recipe = tmp_path / "paper.yaml"
    recipe.write_text("learning_rate: 1.0e-06\nbeta: 0.0\nnum_generations: 4\n", encoding="utf-8")
    out = tmp_path / "spec.yaml"
    proc = _cli("import-trl", str(recipe), "-o", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("import: ")
    assert lines[-2].startswith("incomplete: the recipe names no model, no dataset, no reward")
    assert "--model ORG/MODEL --dataset ORG/DATASET --reward NAME" in lines[-2]
    proc = _cli("validate", str(out), cwd=tmp_path)
    assert proc.returncode == 1
    for field, option in (("model.name_or_path", "--model"), ("dataset", "--dataset"), ("rewards", "--reward")):
        (line,) = [x for x in proc.stdout.splitlines() + proc.stderr.splitlines() if x.startswith(f"error: {field} ")]
        assert f"import-trl RECIPE {option}" in line, line
    proc = _cli("import-trl", str(recipe), "--model", "a/b", "--dataset", "c/d", "--reward", "accuracy", cwd=tmp_path)
    assert proc.returncode == 0 and "incomplete" not in proc.stderr


def test_a_weighted_reward_that_cannot_be_reproduced_is_refused_by_name_or_dropped_with_allow_drop(
    tmp_path: Path,
) -> None:
    recipe = tmp_path / "ioi.yaml"
    recipe.write_text(
        "model_name_or_path: Qwen/Qwen2.5-Coder-7B-Instruct\ndataset_name: open-r1/ioi\n"
        "reward_funcs: [ioi_code, code_format]\nreward_weights: [1.0, 0.1]\n",
        encoding="utf-8",
    )
    out = tmp_path / "spec.yaml"
    proc = _cli("import-trl", str(recipe), "-o", str(out), cwd=tmp_path)
    assert proc.returncode == 1 and not out.exists()
    assert "'ioi_code': is a reward of weight 1.0 that cannot be reproduced" in proc.stderr
    assert "--allow-drop" in proc.stderr
    proc = _cli("import-trl", str(recipe), "--allow-drop", "-o", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "warning: the reward reward_funcs='ioi_code' is dropped" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("import: ")
    # A weight of 0 trains nothing from it: dropping it changes nothing, so it is no error.
    recipe.write_text(recipe.read_text().replace("[1.0, 0.1]", "[0.0, 0.1]"), encoding="utf-8")
    assert [r.name for r in import_trl(recipe).spec.rewards] == ["code_format"]


@pytest.mark.parametrize("loader", LOADERS, ids=lambda c: c.__name__)
def test_recipes_may_use_anchors_but_the_alias_bomb_is_still_refused_early(loader: type) -> None:
    assert safe_yaml.load("a: &x [1, 2]\nb: *x\n", anchors=True, loader=loader) == {"a": [1, 2], "b": [1, 2]}
    with pytest.raises(SpecError) as info:
        safe_yaml.load(BOMB, anchors=True, loader=loader)
    (problem,) = info.value.errors
    assert f"expands to more than {safe_yaml.MAX_EXPANDED} nodes" in problem.message and "(line " in problem.message
    with pytest.raises(SpecError, match="not supported in the run spec"):
        safe_yaml.load("a: &x 1\n", loader=loader)  # a run spec still refuses every anchor


def test_a_recipe_alias_bomb_is_refused_by_import(tmp_path: Path) -> None:
    recipe = tmp_path / "bomb.yaml"
    recipe.write_text("model_name_or_path: a/b\n" + BOMB, encoding="utf-8")
    with pytest.raises(SpecError, match="expands to more than"):
        import_trl(recipe)


# --- open-r1's code reward, run in the sandbox ------------------------------------------------------------------
PROG = "<think>\nsum\n</think>\n<answer>\n```python\na, b = map(int, input().split())\nprint(a + b)\n```\n</answer>"
INFO = {
    "language": "python",
    "test_cases": [
        {"input": "2 3\n", "output": "5\n"},
        {"input": "1 1\n", "output": "2"},
        {"input": "0 0", "output": "1"},
    ],
}


def _code(params: dict[str, object], texts: list[str], infos: list[object]) -> list[float | None]:
    fn = rewards_module().build_reward("open_r1_code", None, None, params)
    return fn(completions=[[{"role": "assistant", "content": t}] for t in texts], verification_info=infos)


def test_open_r1_code_reward_scores_like_open_r1() -> None:
    wrong = PROG.replace("a + b", "a + b + 1")
    no_fence = "print(5)"
    other = {"language": "cpp", "test_cases": INFO["test_cases"]}
    out = _code({}, [PROG, wrong, no_fence, PROG, PROG], [INFO, INFO, INFO, json.dumps(INFO), other])
    assert out[0] == pytest.approx(2 / 3) and out[3] == pytest.approx(2 / 3)  # JSON text as the dataset stores it
    assert out[1] == pytest.approx(1 / 3)  # only 0 + 0 + 1 == 1 passes
    assert out[2] == 0.0 and out[4] is None  # no ```python block: nothing runs; C++ is not run here
    assert _code({"binary": True}, [PROG], [INFO]) == [0.0]
    full = {"language": "python", "test_cases": INFO["test_cases"][:2]}
    assert _code({"binary": True}, [PROG], [full]) == [1.0]


@needs_recipes
def test_the_published_code_recipe_keeps_its_main_reward() -> None:
    (code,) = [p for p in ALL if p.stem == "03_or1_qwen15b_code"]
    spec = import_trl(code).spec
    assert [(r.name, r.builtin, r.weight) for r in spec.rewards] == [
        ("code", "open_r1_code", 1.0),
        ("format", "regex", 0.1),
    ]


def test_bad_values_unknown_keys_and_rewards_are_all_refused_in_one_error(tmp_path: Path) -> None:
    """TRL's parser stops at its first unreadable value; the import names every problem of the recipe at once: each
    bad value, each unknown key (--strict) and the reward, and writes nothing. Numbers written as text still read."""
    recipe = tmp_path / "bad.yaml"
    recipe.write_text(
        "model_name_or_path: Qwen/Qwen2.5-0.5B-Instruct\ndataset_name: trl-lib/x\nlearning_rate: abc\n"
        "num_generations: many\nbf16: maybe\nbeta: 1e-3\nmy_fork_key: 3\nreward_funcs: [nonexistent_reward]\n"
    )
    with pytest.raises(SpecError) as err:
        import_trl(recipe, strict=True)
    fields = [e.field for e in err.value.errors]
    assert sorted(fields) == ["bf16", "learning_rate", "my_fork_key", "num_generations", "reward_funcs"], fields
    assert "must be a number" in str(err.value) and "true or false" in str(err.value)
    with pytest.raises(SpecError) as lax:
        import_trl(recipe)  # without --strict the unknown key is an ignored row, the rest still refused together
    assert sorted(e.field for e in lax.value.errors) == ["bf16", "learning_rate", "num_generations", "reward_funcs"]
    recipe.write_text(
        recipe.read_text()
        .replace("learning_rate: abc", "learning_rate: 3e-6")
        .replace("num_generations: many\nbf16: maybe\n", "num_generations: '4'\n")
        .replace("[nonexistent_reward]", "[accuracy_reward]")
    )
    spec = import_trl(recipe).spec
    assert spec.training["learning_rate"] == 3e-6 and spec.training["beta"] == 1e-3
    assert list(tmp_path.iterdir()) == [recipe]
