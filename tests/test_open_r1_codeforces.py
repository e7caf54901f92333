"""open-r1's `cf_code` (Codeforces) and `length` rewards as built-ins: real g++ and python3 submissions judged in the
real sandbox (tests, checker, file input, time limit, scoring modes), len_reward's values by hand, and the published
Codeforces recipe importing on the first try through the real CLI."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grpo_dashboard.spec import safe_yaml
from grpo_dashboard.spec.jobfiles import rewards_module

from .conftest import REPO
from .sandbox_attacks import BOUNDARIES, sandbox_mode
from .test_trl_recipes import RECIPES, needs_recipes

R = rewards_module()
CPP_SUM = '#include <iostream>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a+b<<"\\n";}\n'
CPP_PRODUCT = CPP_SUM.replace("a+b", "a*b")  # right only where a + b == a * b
CPP_BROKEN = "int main(){ return undeclared; }\n"
CPP_LOOPS_ON_ZERO = CPP_SUM.replace("std::cout", "if(a==0) for(volatile long long i=0;;i++); std::cout")
CPP_FILES = (
    '#include <fstream>\nint main(){std::ifstream in("input.txt");std::ofstream out("output.txt");'
    'long long a,b;in>>a>>b;out<<a+b<<"\\n";}\n'
)
PY_SUM = "a, b = map(int, input().split())\nprint(a + b)\n"
TESTS = [{"input": "2 2\n", "output": "4\n"}, {"input": "2 3\n", "output": "5"}, {"input": "1 1", "output": " 2 \n"}]
# A problem with many right answers: print any number in [a, b]; the checker reads input and the solution's output.
CHECKER = """import sys
a, b = map(int, open(sys.argv[1]).read().split())
got = open(sys.argv[3]).read().split()
print(1 if len(got) == 1 and got[0].lstrip("-").isdigit() and a <= int(got[0]) <= b else 0)
"""
CPP_UPPER = CPP_SUM.replace("a+b", "b")


def answer(code: str, language: str = "cpp") -> str:
    return f"<think>\nsum\n</think>\n<answer>\n```{language}\n{code}```\n</answer>"


def row(**over: Any) -> dict[str, Any]:
    base = {
        "language": "cpp",
        "official_tests": TESTS,
        "generated_tests": 0,  # the dataset card's count: no generated tests
        "generated_checker": None,
        "time_limit": 2.0,
        "memory_limit": 256,
        "input_mode": "stdio",
    }
    return {**base, **over}


def judge(texts: list[str], rows: list[dict[str, Any]], **params: Any) -> list[float | None]:
    fn = R.build_reward("cf_code", "open_r1_cf_code", None, params)
    columns = {key: [r.get(key) for r in rows] for key in rows[0]}
    return fn(completions=[[{"role": "assistant", "content": t}] for t in texts], **columns)


@pytest.fixture(params=BOUNDARIES)
def boundary(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    yield from sandbox_mode(request.param, monkeypatch)


def test_cpp_submissions_score_like_open_r1_under_each_boundary(boundary: str) -> None:
    texts = [answer(CPP_SUM), answer(CPP_PRODUCT), answer(CPP_BROKEN), "no code here", answer(CPP_SUM)]
    rows = [row(), row(), row(), row(), row(official_tests=[])]
    out = judge(texts, rows)
    assert out[0] == pytest.approx(1.1)  # all pass: 1 + 0.1 × 1
    assert out[1] == pytest.approx(0.1 / 3)  # only 2 2 -> 4 passes
    assert out[2] == pytest.approx(-0.1) and out[3] == -1.0 and out[4] is None


def test_scoring_modes_and_submissions_that_are_not_there() -> None:
    texts = [answer(CPP_PRODUCT)] * 2
    assert judge(texts, [row(), row()], scoring_mode="partial") == pytest.approx([1 / 3, 1 / 3])
    assert judge(texts[:1], [row()], scoring_mode="pass_fail") == [0.0]
    # no `language` column: open-r1 extracts no code; a ```python block in a C++ row is no C++ submission
    no_language = row()
    no_language.pop("language")
    assert judge([answer(CPP_SUM)], [no_language]) == [-1.0]
    assert judge([answer(PY_SUM, "python")], [row()]) == [-1.0]
    assert judge([answer(CPP_SUM)], [row()], no_submission_reward=-2.0, no_compile_reward=-0.5) == [pytest.approx(1.1)]
    assert judge([answer(CPP_BROKEN)], [row()], no_compile_reward=-0.5) == [-0.5]


def test_generated_tests_are_appended_when_they_are_a_list() -> None:
    extra = [{"input": "5 7", "output": "12"}, {"input": "3 3", "output": "9"}]
    out = judge([answer(CPP_SUM), answer(CPP_PRODUCT)], [row(generated_tests=extra)] * 2)
    assert out == pytest.approx([0.1 * 4 / 5, 0.1 * 2 / 5])  # 3 3 -> 9 is the product's and fails the sum


def test_a_time_limit_exceeding_loop_fails_that_test_within_its_limit() -> None:
    tests = [*TESTS, {"input": "0 5", "output": "5"}]
    start = time.monotonic()
    (out,) = judge([answer(CPP_LOOPS_ON_ZERO)], [row(official_tests=tests, time_limit=1.0)])
    assert out == pytest.approx(0.1 * 3 / 4)
    assert time.monotonic() - start < 25  # compile + 4 tests, the loop killed at its 1 s limit


def test_a_checker_accepts_an_alternative_answer_and_rejects_a_wrong_one() -> None:
    tests = [{"input": "1 5", "output": "1"}, {"input": "3 4", "output": "3"}]
    with_checker = row(official_tests=tests, generated_checker=CHECKER)
    # b is not the expected output, but it is in [a, b]: the checker passes it; token comparison would not
    assert judge([answer(CPP_UPPER)], [with_checker]) == [pytest.approx(1.1)]
    assert judge([answer(CPP_UPPER)], [row(official_tests=tests)]) == [0.0]
    assert judge([answer(CPP_SUM)], [with_checker]) == [0.0]  # a + b is above b


def test_file_input_mode_reads_input_txt_and_writes_output_txt() -> None:
    out = judge([answer(CPP_FILES), answer(CPP_SUM)], [row(input_mode="file")] * 2)
    assert out == [pytest.approx(1.1), 0.0]  # the stdio program sees no input in file mode


def test_a_python_submission_runs_with_python3() -> None:
    out = judge([answer(PY_SUM, "python"), answer("print(4)\n", "python")], [row(language="python")] * 2)
    assert out == pytest.approx([1.1, 0.1 / 3])


def test_the_rows_memory_limit_bounds_the_program() -> None:
    big = "block = bytearray(300 << 20)\n" + PY_SUM  # 300 MB
    out = judge([answer(big, "python")] * 2, [row(language="python", memory_limit=m) for m in (128, 512)])
    assert out == [0.0, pytest.approx(1.1)]


def test_pass_fail_stops_after_the_first_failing_batch() -> None:
    slow = "a, b = map(int, input().split())\nwhile a == 0:\n    pass\nprint(a + b + (a == 1))\n"
    tests = [{"input": "1 1", "output": "2"}, *[{"input": "0 1", "output": "1"}] * 3]
    problem = row(language="python", official_tests=tests, time_limit=1.5)
    start = time.monotonic()
    assert judge([answer(slow, "python")], [problem], scoring_mode="pass_fail", test_batch_size=1) == [0.0]
    assert time.monotonic() - start < 4.5  # the three 1.5 s loops never ran
    start = time.monotonic()
    assert judge([answer(slow, "python")], [problem], scoring_mode="pass_fail") == [0.0]
    assert time.monotonic() - start >= 4.5  # one batch of all four: every loop ran to its limit


SNOOP = """import os
ok = all(n.startswith(("main", "t")) for n in os.listdir(".."))  # no file with the tests or expected outputs
try:
    if os.fork() == 0:
        os._exit(0)
    ok = False  # a process that could outlive this test
except OSError:
    pass
for what in ("fd/1", "fd/0", "mem", "environ"):
    try:
        open(f"/proc/{os.getppid()}/{what}", "rb" if what != "fd/1" else "wb")
        ok = False
    except OSError:
        pass
a, b = map(int, input().split())
print(a + b if ok else "cheated")
"""


def test_a_submission_cannot_fork_see_the_tests_or_reach_the_driver(boundary: str) -> None:
    assert judge([answer(SNOOP, "python")], [row(language="python")]) == [pytest.approx(1.1)]


@pytest.mark.parametrize(
    ("param", "value", "allowed"),
    [
        ("scoring_mode", "best", "pass_fail, partial, weighted_sum"),
        ("test_batch_size", 0, "-1 (all tests at once) or a positive integer"),
        ("test_batch_size", "all", "-1 (all tests at once) or a positive integer"),
        ("workers", 0, "an integer in 1..64"),
        ("compile_timeout_s", -1, "seconds in (0, 600]"),
    ],
)
def test_invalid_parameters_are_named_with_value_and_allowed_values(param: str, value: Any, allowed: str) -> None:
    with pytest.raises(ValueError) as info:
        R.build_reward("cf_code", "open_r1_cf_code", None, {param: value})
    assert f"params.{param} = {value!r} is invalid" in str(info.value) and allowed in str(info.value)


def _length(texts: list[str], solutions: list[str]) -> list[float | None]:
    fn = R.build_reward("length", "open_r1_length", None, {})
    return fn(completions=[[{"role": "assistant", "content": t}] for t in texts], solution=solutions)


def test_length_reward_gives_kimis_lambda_by_hand() -> None:
    texts = ["\\boxed{4}", "x" * 11 + "\\boxed{5}", "y" * 20 + "\\boxed{4}", "\\boxed{7}", "z" * 5 + "\\boxed{1}"]
    # lengths 9, 20, 29, 9, 14: min 9, max 29; lambda = 0.5 - (len - 9) / 20
    out = _length(texts, ["4", "4", "4", "4", "hello"])
    assert out == pytest.approx(
        [
            0.5,  # correct, shortest
            -0.05,  # wrong: min(0, 0.5 - 11/20)
            -0.5,  # correct, longest
            0.0,  # wrong, shortest: min(0, 0.5)
            0.25,  # the gold answer does not parse: counted correct, lambda = 0.5 - 5/20
        ]
    )
    assert _length(["\\boxed{4}", "\\boxed{5}"], ["4", "4"]) == [0.0, 0.0]  # equal lengths
    with pytest.raises(KeyError, match="'solution'"):
        R.build_reward("length", "open_r1_length", None, {})(completions=["a"])
    with pytest.raises(ValueError, match="params.solution_column = '' is invalid"):
        R.build_reward("length", "open_r1_length", None, {"solution_column": ""})


def test_open_r1_length_and_cf_code_import_as_the_built_ins(tmp_path: Path) -> None:
    from grpo_dashboard.spec.trl_import import import_trl

    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "model_name_or_path: Qwen/Qwen2.5-0.5B\ndataset_name: a/b\nreward_funcs: [accuracy, length, cf_code]\n"
        "code_eval_test_batch_size: 4\ncode_eval_scoring_mode: partial\n",
        encoding="utf-8",
    )
    result = import_trl(recipe)
    assert [(r.name, r.builtin, r.params) for r in result.spec.rewards] == [
        ("accuracy", "math_accuracy", {"solution_column": "solution"}),
        ("length", "open_r1_length", {"solution_column": "solution"}),
        ("cf_code", "open_r1_cf_code", {"test_batch_size": 4, "scoring_mode": "partial"}),
    ]


@needs_recipes
def test_the_published_codeforces_recipe_imports_first_try_with_the_real_cli(tmp_path: Path) -> None:
    recipe = RECIPES / "04_or1_coder7b_codeforces.yaml"
    out = tmp_path / "spec.yaml"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_dashboard", "import-trl", str(recipe), "-o", str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=180,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    spec = safe_yaml.load(out.read_text(encoding="utf-8"))
    assert [(r["name"], r["builtin"], r.get("weight", 1.0)) for r in spec["rewards"]] == [
        ("cf_code", "open_r1_cf_code", 1.0),
        ("code_format", "regex", 0.1),
    ]
    assert spec["rewards"][0]["params"] == {"test_batch_size": -1, "scoring_mode": "weighted_sum"}
    assert "unsupported" not in [line.split()[1] for line in proc.stderr.splitlines() if "code_eval" in line]


# A wrong answer that tries to make the checker say 1: it overwrites every checker.py it can reach, plants modules a
# checker imports where a script's directory would put them on sys.path, then prints a number outside [a, b].
TAMPER = """import os
fake = "print(1)\\n"
for d in (".", "..", "../.."):
    for name in ("checker.py", "sys.py", "os.py", "re.py", "sitecustomize.py", "usercustomize.py"):
        try:
            with open(os.path.join(d, name), "w") as f:
                f.write(fake)
        except OSError:
            pass
print(-7)
"""


def test_a_submission_cannot_replace_the_checker_or_its_imports(boundary: str) -> None:
    tests = [{"input": "1 5", "output": "1"}, {"input": "3 4", "output": "3"}, {"input": "2 9", "output": "2"}]
    problem = row(language="python", official_tests=tests, generated_checker=CHECKER)
    assert judge([answer(TAMPER, "python")], [problem], scoring_mode="partial") == [0.0]
    assert judge([answer(PY_SUM.replace("a + b", "b"), "python")], [problem], scoring_mode="partial") == [1.0]
