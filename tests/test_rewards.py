"""The reward library in jobs/grpo_rewards.py: each reward on positive and negative cases, both completion formats,
None handling, parameter errors, and the registry's interface used by validation."""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path
from typing import Any

import pytest

from grpo_dashboard.spec.jobfiles import rewards_module
from grpo_dashboard.spec.run_spec import RunSpec

R = rewards_module()


def conv(texts: list[str]) -> list[list[dict[str, str]]]:
    """The same completions in TRL's conversational form."""
    return [[{"role": "assistant", "content": t}] for t in texts]


def call(name: str, texts: list[str], params: dict[str, Any] | None = None, **columns: Any) -> list[float | None]:
    """Run a built-in on standard and conversational completions; both must agree."""
    fn = R.build_reward(name, None, None, dict(params or {}))
    kwargs = {"prompts": ["p"] * len(texts), "trainer_state": None, "log_extra": None, **columns}
    plain = fn(completions=list(texts), **kwargs)
    chat = fn(completions=conv(texts), **kwargs)
    assert plain == chat, (plain, chat)
    assert len(plain) == len(texts)
    assert all(v is None or isinstance(v, float) for v in plain)
    return plain


# ----------------------------------------------------------------- format


def test_think_format_lenient_and_strict() -> None:
    good = "<think>\nadd them\n</think>\n<answer>\n4\n</answer>"
    loose = "<think>add them</think> <answer>4</answer>"
    assert call("think_format", [good, loose, "4", ""]) == [1.0, 1.0, 0.0, 0.0]
    assert call("think_format", [good, loose, "4"], {"strict": True}) == [1.0, 0.0, 0.0]


def test_trl_think_format_reused() -> None:
    assert call("trl_think_format", ["<think>x</think> 4", "no tags"]) == [1.0, 0.0]


def test_regex_search_and_full_match() -> None:
    assert call("regex", ["Answer: 12", "nothing"], {"pattern": r"Answer: \d+"}) == [1.0, 0.0]
    assert call("regex", ["Answer: 12", "Answer: 12 extra"], {"pattern": r"Answer: \d+", "full": True}) == [1.0, 0.0]


def test_a_catastrophic_regex_costs_a_short_stated_time_and_says_so(capfd: pytest.CaptureFixture[str]) -> None:
    """`^(.|..)*!$` backtracks exponentially on text without a final `!` (Python's re: seconds per completion here,
    hours on a longer one): each match is stopped after 0.1 s, a call after 1 s, and the undecided ones are None."""
    texts = ["hello!", "a" * 30 + "!x", "b" * 30 + "!y", "wow!", "c" * 30 + "!z", "d" * 30 + "!w"]
    start = time.monotonic()
    out = call("regex", texts, {"pattern": r"^(.|..)*!$"})
    assert time.monotonic() - start < 1.0 + 1.0  # the call budget, plus slack for a loaded machine
    assert out[0] == 1.0 and out[1] is None and out[2] is None
    assert out[3] in (1.0, None) and out[4] is None and out[5] is None  # after the budget: not matched at all
    err = capfd.readouterr().err
    assert "was stopped on" in err and "0.1 s each" in err and "backtracks catastrophically" in err


@pytest.mark.parametrize(
    ("name", "params", "words"),
    [
        ("regex", {"pattern": "(unclosed"}, ["pattern", "(unclosed", "not a valid regular expression"]),
        ("regex", {}, ["pattern", "non-empty"]),
        ("think_format", {"strict": "yes"}, ["strict", "'yes'", "true or false"]),
        ("exact_match", {"extract": "middle"}, ["extract", "'middle'", "answer_tag"]),
        (
            "soft_overlong",
            {"max_completion_len": 100, "soft_punish_cache": 200},
            ["soft_punish_cache", "200", "1..max"],
        ),
        ("repetition_penalty", {"max_penalty": 1.0}, ["max_penalty", "<= 0"]),
        ("target_length", {"unit": "bytes"}, ["unit", "'bytes'", "tokens"]),
        ("multiple_choice", {"choices": "abc"}, ["choices", "upper-case"]),
        ("code_tests", {"timeout_s": 0}, ["timeout_s", "(0, 600]"]),
        ("json_valid", {"schema": {"type": "strng"}}, ["schema"]),
        ("python", {"code": "def reward(:"}, ["code", "syntax error", "line 1"]),
        ("python", {"code": "def score(completions, **kw):\n    return []"}, ["function", "'reward'", "score"]),
    ],
)
def test_bad_params_raise_value_error_naming_param_and_value(
    name: str, params: dict[str, Any], words: list[str]
) -> None:
    with pytest.raises(ValueError) as info:
        R.REWARDS[name].factory(**params)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


# ----------------------------------------------------------------- accuracy


def test_math_accuracy_on_real_latex_answers() -> None:
    texts = [
        r"So the result is \boxed{\frac{1}{2}}.",
        r"\boxed{3/4}",
        "<answer>0.5</answer>",
        r"\boxed{\frac{2}{3}}",
        "I am not sure.",
        "",
    ]
    solutions = [r"\frac{1}{2}", r"$\frac{3}{4}$", "1/2", "0.5", r"\frac{1}{2}", "7"]
    assert call("math_accuracy", texts, solution=solutions) == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]


def test_math_accuracy_gsm8k_solutions_custom_column_and_unparseable_gold() -> None:
    texts = [r"<think>5+7</think><answer>\boxed{12}</answer>", "The answer is 13.", "12"]
    answers = ["Tom has 5 and gets 7 more.\n#### 12", "#### 12", "no number here at all"]
    out = call("math_accuracy", texts, {"solution_column": "answer"}, answer=answers)
    assert out == [1.0, 0.0, None]


def test_math_accuracy_missing_column_is_a_clear_key_error() -> None:
    fn = R.build_reward("acc", "math_accuracy", None, {})
    with pytest.raises(KeyError, match="'solution'.*Add the column"):
        fn(completions=["1"], prompts=["p"], question=["q"])


def test_trl_accuracy_reused_for_both_formats() -> None:
    assert call("trl_accuracy", [r"\boxed{\frac{1}{3}}", r"\boxed{\frac{1}{2}}"], solution=[r"\frac{1}{3}"] * 2) == [
        1.0,
        0.0,
    ]
    out = call(
        "trl_accuracy",
        [r"<think>\boxed{2}</think> \boxed{1}", r"\boxed{1} no end"],
        {"reasoning": True},
        solution=["1", "1"],
    )
    assert out == [1.0, 0.0]


def test_exact_match_normalised_and_raw() -> None:
    texts = [
        "<answer>The Eiffel Tower!</answer>",
        "It is paris.",
        "Final answer: London",
        "the answer is eiffel tower",
    ]
    gold = ["eiffel tower", "Paris", "london", "Eiffel tower"]
    assert call("exact_match", texts, answer=gold) == [1.0, 0.0, 1.0, 1.0]
    assert call("exact_match", ["Paris", "paris"], {"normalize": False}, answer=["Paris", "Paris"]) == [1.0, 0.0]
    assert call("exact_match", ["x"], answer=[""]) == [None]


def test_numeric_match_with_tolerance_and_formats() -> None:
    texts = [r"\boxed{1,234}", "#### 0.75", r"<answer>\frac{3}{4}</answer>", "about 3.14", "no idea", "41"]
    gold = ["1234", "3/4", "0.75", "3.14159", "5", "Result\n#### 42"]
    assert call("numeric_match", texts, answer=gold) == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    assert call("numeric_match", ["about 3.14"], {"abs_tol": 0.01}, answer=["3.14159"]) == [1.0]
    assert call("numeric_match", ["1"], answer=["none"]) == [None]
    assert call("numeric_match", ["42"], answer=[42]) == [1.0]


def test_multiple_choice_letters_and_indices() -> None:
    texts = ["<answer>B</answer>", "The answer is (C).", "A long story without a choice", r"\boxed{d}", "B) Paris"]
    gold = ["B", "(C)", "A", 3, "1"]
    assert call("multiple_choice", texts, answer=gold) == [1.0, 1.0, 0.0, 1.0, 1.0]
    assert call("multiple_choice", ["E"], {"choices": "ABCDE"}, answer=["E"]) == [1.0]
    assert call("multiple_choice", ["A"], answer=["Z"]) == [None]


def test_extract_answer_modes() -> None:
    text = "<think>2+2</think>\n<answer>\\boxed{4}</answer>\nthanks"
    assert R.extract_answer(text) == "4"
    assert R.extract_answer(text, "answer_tag") == "4"
    assert R.extract_answer(text, "last_line") == "thanks"
    assert R.extract_answer("no tags", "answer_tag") == ""
    assert R.extract_answer(r"\boxed{\frac{1}{\sqrt{2}}}", "boxed") == r"\frac{1}{\sqrt{2}}"


# ----------------------------------------------------------------- length


def test_target_length_tokens_words_chars_and_completion_ids() -> None:
    assert call("target_length", ["one two three four", "one two", ""], {"target": 4, "unit": "words"}) == [
        1.0,
        0.5,
        0.0,
    ]
    assert call("target_length", ["abcd"], {"target": 2, "unit": "chars"}) == [0.0]
    assert call("target_length", ["one two three"], {"target": 4, "unit": "words", "tolerance": 1}) == [1.0]
    fn = R.build_reward("len", "target_length", None, {"target": 10})
    assert fn(completions=["x"], completion_ids=[[1] * 5]) == [0.5]


def test_soft_overlong_matches_dapo_formula() -> None:
    fn = R.build_reward("ov", "soft_overlong", None, {"max_completion_len": 100, "soft_punish_cache": 20})
    assert fn(completions=["a"] * 3, completion_ids=[[1] * 50, [1] * 90, [1] * 120]) == [0.0, -0.5, -1.0]
    assert call(
        "soft_overlong", ["a b c", "a " * 12], {"max_completion_len": 10, "soft_punish_cache": 5, "unit": "words"}
    ) == [0.0, -1.0]


def test_repetition_penalty() -> None:
    out = call(
        "repetition_penalty",
        ["the cat sat on the mat today", "go go go go go go go go"],
        {"ngram_size": 2, "unit": "words"},
    )
    assert out[0] == 0.0 and out[1] is not None and out[1] < -0.8
    fn = R.build_reward("rep", "repetition_penalty", None, {"ngram_size": 2})
    assert fn(completions=["x", "y"], completion_ids=[[1, 2, 3, 4], [5, 5, 5, 5, 5]]) == [0.0, -0.75]


def test_cosine_scaled_reused() -> None:
    fn = R.build_reward("cos", "cosine_scaled", None, {"max_len": 100})
    out = fn(
        completions=[r"\boxed{\frac{1}{3}}", r"\boxed{\frac{1}{2}}"],
        solution=[r"\frac{1}{3}"] * 2,
        completion_ids=[[1] * 50, [1] * 50],
    )
    assert out == pytest.approx([0.75, -0.75])


# ----------------------------------------------------------------- structured


def test_json_valid_without_schema() -> None:
    texts = ['{"a": 1}', "Here:\n```json\n[1, 2]\n```", '<answer>{"ok": true}</answer>', "{broken", ""]
    assert call("json_valid", texts) == [1.0, 1.0, 1.0, 0.0, 0.0]


SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def test_json_valid_with_schema() -> None:
    texts = [
        '{"name": "Ann", "age": 3}',
        '{"name": "Ann"}',
        '{"name": "Ann", "age": -1}',
        '{"name": "Ann", "age": 3, "x": 1}',
        "nope",
    ]
    assert call("json_valid", texts, {"schema": SCHEMA}) == [1.0, 0.5, 0.5, 0.5, 0.0]
    assert call("json_valid", texts[:2], {"schema": SCHEMA, "partial_credit": 0.0}) == [1.0, 0.0]


def test_json_valid_schema_from_column_and_needs_jsonschema(monkeypatch: pytest.MonkeyPatch) -> None:
    out = call(
        "json_valid",
        ['{"n": 1}', '{"n": "x"}'],
        {"schema_column": "schema"},
        schema=['{"properties": {"n": {"type": "number"}}}'] * 2,
    )
    assert out == [1.0, 0.5]
    with pytest.raises(ValueError, match="not a valid JSON schema"):
        R.REWARDS["json_valid"].factory(schema={"type": "no-such-type"})
    monkeypatch.setitem(__import__("sys").modules, "jsonschema", None)
    with pytest.raises(ValueError, match="needs the `jsonschema` package.*pip install jsonschema"):
        R.REWARDS["json_valid"].factory(schema=SCHEMA)
    assert call("json_valid", ['{"a": 1}', "nope"]) == [1.0, 0.0]  # without a schema it is not needed


# ----------------------------------------------------------------- code

ADD = "def add(a, b):\n    return a + b\n"


def test_code_tests_assert_list_pass_fraction() -> None:
    tests = [["assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(0, 0) == 1"]] * 3
    texts = [f"Here you go:\n```python\n{ADD}```", "```python\ndef add(a, b):\n    return a * b\n```", "no code"]
    out = call("code_tests", texts, tests=tests)
    assert out[0] == pytest.approx(2 / 3) and out[1] == pytest.approx(1 / 3) and out[2] == 0.0


def test_code_tests_humaneval_script_io_cases_and_missing_tests() -> None:
    check = "def check(candidate):\n    assert candidate(2, 3) == 5\n"
    assert call(
        "code_tests",
        [f"```python\n{ADD}```"],
        {"entry_point_column": "entry_point"},
        tests=[check],
        entry_point=["add"],
    ) == [1.0]
    io = [{"input": "2 3\n", "output": "5\n"}, {"input": "1 1\n", "output": "3"}]
    prog = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    assert call("code_tests", [prog], tests=[io]) == [0.5]
    assert call("code_tests", [prog], tests=['{"inputs": ["4 4"], "outputs": ["8"]}']) == [1.0]
    assert call("code_tests", [prog, prog], tests=[None, []]) == [None, None]


def test_code_tests_infinite_loop_times_out_to_partial_credit() -> None:
    texts = ["```python\ndef f():\n    while True:\n        pass\n```"]
    out = call("code_tests", texts, {"timeout_s": 1.0}, tests=[["assert True", "f()"]])
    assert out == [0.5]


def test_parse_tests_rejects_unknown_shapes() -> None:
    with pytest.raises(ValueError, match="unsupported tests"):
        R.parse_tests(42)


# ----------------------------------------------------------------- custom


def test_inline_python_reward_is_parsed_at_build_and_run_on_call(tmp_path: Any) -> None:
    marker = tmp_path / "ran"
    code = (
        f"open({str(marker)!r}, 'w').write('x')\n"
        "def reward(completions, bonus=0.0, **kwargs):\n"
        "    return [len(c if isinstance(c, str) else c[-1]['content']) + bonus for c in completions]\n"
    )
    fn = R.build_reward("mine", "python", None, {"code": code, "args": {"bonus": 0.5}})
    assert not marker.exists()  # building (what validation does) never executes the code
    assert fn(completions=["ab", "abc"]) == [2.5, 3.5]
    assert fn(completions=conv(["ab"])) == [2.5]
    assert marker.exists()


def test_inline_async_reward_stays_async() -> None:
    code = "async def reward(completions, **kw):\n    return [1.0 for _ in completions]\n"
    fn = R.build_reward("a", "python", None, {"code": code})
    assert asyncio.iscoroutinefunction(fn)
    assert asyncio.run(fn(completions=["x"])) == [1.0]


def test_custom_file_reward_with_params(tmp_path: Any) -> None:
    (tmp_path / "my_rewards.py").write_text(
        "def shout(completions, factor=1.0, **kw):\n    return [factor * c.count('!') for c in completions]\n"
    )
    fn = R.build_reward("shout", None, "my_rewards.py:shout", {"factor": 2.0}, str(tmp_path))
    assert fn.__name__ == "shout"
    assert fn(completions=["!!", "."]) == [4.0, 0.0]


# ----------------------------------------------------------------- registry interface


def test_registry_interface_used_by_validation() -> None:
    for name, rdef in R.REWARDS.items():
        assert rdef.name == name and rdef.kind in R.KINDS and rdef.description
        assert set(rdef.help) == set(rdef.params), name
        if name not in ("regex", "python"):
            rdef.factory(**{})  # defaults are valid
    assert R.required_columns("math_accuracy", {}) == ["solution"]
    assert R.required_columns("math_accuracy", {"solution_column": "answer"}) == ["answer"]
    assert R.required_columns("code_tests", {"entry_point_column": "ep"}) == ["tests", "ep"]
    assert R.required_columns("json_valid", {}) == []
    assert R.required_columns("letter_fraction", {}) == []


def test_existing_names_keep_working() -> None:
    assert call("letter_fraction", ["aab", ""], {"letter": "a"}) == [pytest.approx(2 / 3), 0.0]
    assert call("constant", ["x", "y"], {"value": 2}) == [2.0, 2.0]
    assert not any(math.isnan(v) for v in call("constant", ["x"]) if v is not None)


def test_yaml_numeric_strings_are_accepted() -> None:
    assert call("numeric_match", ["3.1416"], {"rel_tol": "1e-3"}, answer=["3.14159"]) == [1.0]


@pytest.mark.training
def test_builtins_run_inside_a_real_grpo_job(tmp_path: Any, tiny_model: Any) -> None:
    """Every family, in one real TRL run with conversational prompts, logs rewards/<name>/mean."""
    import json
    import subprocess
    import sys

    repo = Path(__file__).resolve().parent.parent
    rewards = [
        {"name": "format", "builtin": "think_format"},
        {"name": "acc", "builtin": "math_accuracy"},
        {"name": "num", "builtin": "numeric_match", "params": {"answer_column": "solution"}},
        {"name": "overlong", "builtin": "soft_overlong", "params": {"max_completion_len": 8, "soft_punish_cache": 4}},
        {"name": "rep", "builtin": "repetition_penalty"},
        {"name": "json", "builtin": "json_valid"},
        {"name": "code", "builtin": "code_tests", "params": {"tests_column": "solution", "timeout_s": 2.0}},
        {
            "name": "inline",
            "builtin": "python",
            "params": {
                "code": "def reward(completions, completion_ids, **kw):\n    return [len(i) / 8 for i in "
                "completion_ids]\n"
            },
        },
    ]
    spec = {
        "name": "rewards-job",
        "model": {"name_or_path": str(tiny_model), "dtype": "float32"},
        "dataset": {
            "data_files": str(repo / "examples/data/math_tiny.jsonl"),
            "prompt_column": "question",
            "system_prompt": "Answer.",
        },
        "rewards": rewards,
        "output_dir": str(tmp_path / "out"),
        "save_model": False,
        "training": {
            "use_cpu": True,
            "bf16": False,
            "per_device_train_batch_size": 4,
            "num_generations": 4,
            "max_completion_length": 8,
            "max_steps": 1,
            "logging_steps": 1,
            "save_strategy": "no",
            "report_to": "none",
        },
    }
    (tmp_path / "run.yaml").write_text(RunSpec.from_dict(spec).to_job_yaml())  # the resolved run.yaml a job gets
    proc = subprocess.run(
        [sys.executable, str(repo / "jobs/grpo_job.py"), "--config", str(tmp_path / "run.yaml")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    metrics = next(r["metrics"] for r in records if r["type"] == "log" and "reward" in r["metrics"])
    for r in rewards:
        assert f"rewards/{r['name']}/mean" in metrics, sorted(metrics)
    assert records[-1]["event"] == "finished"
