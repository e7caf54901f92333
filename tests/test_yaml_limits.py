"""YAML that cannot explode: alias bombs, deep nesting, oversize text and huge values all give a short SpecError
(never RecursionError, never a message the size of the input), in the loader, the spec, the form and the served app."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from gradio_client import Client
from gradio_client.exceptions import AppError

from grpo_dashboard.errors import MAX_LISTED_ERRORS, FieldError, SpecError
from grpo_dashboard.launch import runs
from grpo_dashboard.spec import forms, presets, safe_yaml
from grpo_dashboard.spec.run_spec import RewardSpec, RunSpec

from .conftest import served_client

SHORT = 2000
LOADERS = sorted({safe_yaml.Loader, safe_yaml.PySafeLoader}, key=lambda c: c.__name__)


def billion_laughs(levels: int = 9) -> str:
    """The classic bomb: each level is a list of nine aliases of the one before (9**9 "lol"s from ~400 bytes)."""
    names = "abcdefghijklmnopqrstuvwxyz"[:levels]
    lines = [f"{names[0]}: &{names[0]} [{','.join(['lol'] * 9)}]"]
    for prev, name in zip(names[:-1], names[1:], strict=True):
        lines.append(f"{name}: &{name} [{','.join([f'*{prev}'] * 9)}]")
    return "\n".join(lines) + "\n"


BOMB = billion_laughs()
ALIAS_ONLY = "name: x\nrewards:\n  - name: a\n    params: *p\n"  # an alias with no anchor before it
DEEP_SEQ = "a: " + "[" * 1000 + "]" * 1000
DEEP_MAP = "a: " + "{a: " * 1000 + "1" + "}" * 1000


def nested(depth: int) -> str:
    """YAML whose deepest node is `depth` levels down (the top mapping counts as one)."""
    return "a: " + "[" * (depth - 1) + "]" * (depth - 1)


def spec_error(text: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        RunSpec.from_yaml(text)
    assert len(str(info.value)) < SHORT
    return info.value


# (a) alias bombs


def test_billion_laughs_is_refused_at_the_first_anchor_with_a_short_message() -> None:
    assert len(BOMB) < 500
    err = spec_error(BOMB)
    (problem,) = err.errors
    assert problem.field == "(yaml)" and problem.value == "&a"
    assert "aliases (`*name`) and anchors (`&name`) are not supported" in problem.message
    assert "line 1" in problem.message and "write the value out" in problem.message


def test_an_alias_alone_is_refused_too() -> None:
    (problem,) = spec_error(ALIAS_ONLY).errors
    assert problem.value == "*p" and "line 4" in problem.message and "aliases" in problem.message


@pytest.mark.parametrize("loader", LOADERS, ids=lambda c: c.__name__)
def test_both_loaders_refuse_aliases_and_anchors(loader: type) -> None:
    for text, value in [(BOMB, "&a"), (ALIAS_ONLY, "*p"), ("a: &x 1\n", "&x"), ("a: [1, &y {b: 2}]\n", "&y")]:
        with pytest.raises(SpecError) as info:
            safe_yaml.load(text, loader=loader)
        assert info.value.errors[0].value == value


def test_alias_bomb_in_reward_params_is_refused_on_its_field() -> None:
    with pytest.raises(SpecError) as info:
        forms.rewards_from_rows([["a", 1.0, "letter_fraction", "", "{x: &a [1, 1], y: [*a, *a]}"]])
    (problem,) = info.value.errors
    assert problem.field == "rewards[0].params"
    assert "JSON object" in problem.message and "not supported in reward params" in problem.message


def test_to_yaml_never_writes_anchors_so_specs_round_trip() -> None:
    shared = {"letter": "a"}
    spec = RunSpec(name="x", rewards=[RewardSpec(name="a", params=shared), RewardSpec(name="b", params=shared)])
    spec.training = {"a": [1, 2], "b": None}
    spec.training["b"] = spec.training["a"]
    text = spec.to_yaml()
    assert "&" not in text and "*" not in text
    assert RunSpec.from_yaml(text) == spec


# (b) nesting


@pytest.mark.parametrize("text", [DEEP_SEQ, DEEP_MAP], ids=["sequences", "mappings"])
def test_deep_nesting_is_a_spec_error_naming_the_limit_not_a_recursion_error(text: str) -> None:
    (problem,) = spec_error(text).errors
    assert f"nests deeper than {safe_yaml.MAX_DEPTH} levels" in problem.message
    assert "Flatten the structure" in problem.message


@pytest.mark.parametrize("loader", LOADERS, ids=lambda c: c.__name__)
def test_nesting_up_to_the_limit_loads(loader: type) -> None:
    assert safe_yaml.load(nested(safe_yaml.MAX_DEPTH), loader=loader) is not None
    for text in (nested(safe_yaml.MAX_DEPTH + 1), DEEP_SEQ, DEEP_MAP, "[" * 100_000):
        with pytest.raises(SpecError, match="nests deeper than"):
            safe_yaml.load(text, loader=loader)


def test_a_deep_block_mapping_is_refused_by_depth() -> None:
    text = "".join(" " * i + f"k{i}:\n" for i in range(200)) + " " * 200 + "1\n"
    assert len(text.encode()) < safe_yaml.MAX_BYTES
    (problem,) = spec_error(text).errors
    assert f"nests deeper than {safe_yaml.MAX_DEPTH} levels (line " in problem.message


# (c) size


def test_oversize_text_is_refused_naming_size_limit_and_fix() -> None:
    padded = "name: x\n# " + "c" * safe_yaml.MAX_BYTES + "\n"
    (problem,) = spec_error(padded).errors
    assert "128.0 KiB" in problem.message and str(safe_yaml.MAX_BYTES) in problem.message
    assert "of YAML" in problem.message and "shorten it" in problem.message
    just_under = "name: x\n# " + "c" * (safe_yaml.MAX_BYTES - 20) + "\n"
    assert RunSpec.from_yaml(just_under).name == "x"


def test_size_counts_utf8_bytes() -> None:
    text = "name: x\n# " + "é" * (safe_yaml.MAX_BYTES // 2 + 10) + "\n"  # fewer characters than the limit
    assert len(text) < safe_yaml.MAX_BYTES
    with pytest.raises(SpecError, match="KiB of YAML"):
        RunSpec.from_yaml(text)


# (d) huge values and many errors


def test_a_huge_value_in_a_wrong_typed_field_gives_a_short_error() -> None:
    (problem,) = spec_error("name: x\nbackend: {num_processes: " + "x" * 100_000 + "}\n").errors
    assert problem.field == "backend.num_processes" and "must be int" in problem.message
    assert len(str(problem)) < 400 and len(problem.to_dict()["value"]) <= 200


def test_a_huge_training_value_is_reported_shortly_by_validation() -> None:
    spec = presets.preset_spec(presets.DEFAULT_PRESET)
    spec.training["num_generations"] = "x" * 100_000
    _, report = runs.check(spec, presets.PROJECT_ROOT)
    assert report.errors
    assert all(len(str(e)) < SHORT for e in report.errors)


def test_field_error_shortens_any_value() -> None:
    for value in [
        "x" * 1_000_000,
        list(range(1_000_000)),
        {str(i): i for i in range(100_000)},
        [[[[[[[[[[1]]]]]]]]]],
        10**5000,
    ]:
        err = FieldError("training." + "k" * 10_000, value, "is wrong.")
        assert len(str(err)) < 400, str(err)[:500]
        assert len(err.to_dict()["value"]) <= 200 and len(err.to_dict()["field"]) <= 120


def test_a_spec_error_lists_a_bounded_number_of_problems() -> None:
    errors = [FieldError(f"f{i}", "v" * 10_000, "is wrong.") for i in range(500)]
    text = str(SpecError(errors))
    assert "Invalid run spec (500 problems)" in text
    assert f"... and {500 - MAX_LISTED_ERRORS} more" in text and len(text) < 10_000


def test_many_unknown_keys_give_a_bounded_message() -> None:
    text = "".join(f"k{i}: {i}\n" for i in range(5000))
    with pytest.raises(SpecError) as info:
        RunSpec.from_yaml(text)
    assert len(info.value.errors) == 5000 and len(str(info.value)) < 10_000


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("name: 2001-13-45\n", "cannot convert"),
        ("name: " + "9" * 5000 + "\n", "cannot convert"),
        ("name: !!python/object:os.system x\n", "not valid YAML"),
        ("a: 1\n---\nb: 2\n", "not valid YAML"),
    ],
    ids=["bad-date", "huge-int", "python-tag", "two-documents"],
)
def test_values_yaml_cannot_build_are_spec_errors(text: str, fragment: str) -> None:
    with pytest.raises(SpecError, match=fragment):
        RunSpec.from_yaml(text)


def test_a_form_list_field_with_bad_yaml_is_reported_on_its_field() -> None:
    fields = forms.fields_by_key()
    key = next(k for k, f in fields.items() if f.widget == "list")
    values = forms.values_from_spec(presets.preset_spec(presets.DEFAULT_PRESET))
    values[key] = "[&a 1, *a"
    with pytest.raises(SpecError) as info:
        forms.spec_from_values(values)
    assert [e.field for e in info.value.errors] == [key]


# (e) the exploit against the served app


def rss_bytes() -> int:
    """Resident memory of this process (the app runs in it)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    import psutil

    return psutil.Process().memory_info().rss


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("SPACE_ID", raising=False)
        with served_client(tmp_path_factory.mktemp("yaml-limits-data")) as client:
            yield client


def answer(client: Client, *args: Any, api_name: str) -> str:
    """The summary an endpoint shows, or the text of the gr.Error it raised."""
    try:
        out = client.predict(*args, api_name=api_name)
    except AppError as exc:
        return str(exc)
    return out[1] if api_name == "/yaml_to_form" else str(out)


def test_served_app_refuses_bombs_briefly_and_keeps_answering(served: Client) -> None:
    good = presets.preset_yaml(presets.DEFAULT_PRESET)
    assert "YAML applied" in answer(served, good, api_name="/yaml_to_form")  # warm up before measuring
    before = rss_bytes()
    for text, fragment in [
        (BOMB, "not supported"),
        (ALIAS_ONLY, "not supported"),
        (DEEP_SEQ, "nests deeper than"),
        (DEEP_MAP, "nests deeper than"),
    ]:
        shown = answer(served, text, api_name="/yaml_to_form")
        assert fragment in shown and len(shown) < SHORT, shown[:SHORT]
        shown = answer(served, text, api_name="/estimate_hardware")
        assert fragment in shown and len(shown) < SHORT, shown[:SHORT]
    assert "YAML applied" in answer(served, good.replace("beta: 0.0", "beta: 0.04"), api_name="/yaml_to_form")
    assert rss_bytes() - before < 100 * 1024 * 1024


def test_loaded_yaml_equals_pyyaml_safe_load_for_plain_specs() -> None:
    for name in presets.PRESETS:
        text = presets.preset_yaml(name)
        assert safe_yaml.load(text) == yaml.safe_load(text)
    for path in Path(presets.PROJECT_ROOT, "examples").glob("*.yaml"):
        text = path.read_text(encoding="utf-8")
        assert safe_yaml.load(text) == yaml.safe_load(text)
