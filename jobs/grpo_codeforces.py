"""open-r1's `cf_code` reward (Codeforces, C++ or Python) as a built-in that judges in this job's own sandbox.

open-r1 (src/open_r1/rewards.py `cf_code_reward`, utils/competitive_programming/cf_scoring.py `score_submission`)
sends each submission to Piston workers; here one sandboxed Python driver per completion (`run_sandboxed` with
`allow_subprocess=True`) compiles and judges it, so no Piston workers are needed. Rows follow the dataset
open-r1/codeforces, config "verifiable-prompts":

- `language`: "cpp" or "python"; the code is the last ```<language> block of the completion (no column: no code).
- `official_tests`: [{input, output}, ...]; `generated_tests` are appended when they are a list, as open-r1's code
  does (the dataset card gives an int count there: a non-list counts as no generated tests).
- `generated_checker`: Python source of a checker, or empty/None; `time_limit` (seconds; 2 when missing),
  `memory_limit` (MB; 256 when missing); `input_mode`: "stdio", or "file" (the program reads input.txt and writes
  output.txt in its directory).

Score: no tests -> None; no code -> `no_submission_reward` (-1.0); a compile error -> `no_compile_reward` (-0.1).
A test passes when the program exits 0 within `time_limit` and the verdict is pass. With a checker the verdict is
`python3 checker.py input.txt correct_output.txt solution_output.txt`: pass when it exits 0 and the first token of
its stdout is a number >= 1 (our reading of the checker contract: Piston's Codeforces package passes a test when the
checker's score is 1). Without a checker: the output's whitespace-separated tokens equal the expected ones.
`scoring_mode`: "pass_fail" (1.0 iff all pass; judging stops after the first batch with a failure), "partial" (the
fraction passed) or "weighted_sum" (open-r1's default: pass_fail + 0.1 * fraction). `test_batch_size` (-1: all at
once) changes only where pass_fail stops. C++ is compiled with `g++ -std=c++17 -O2`; Python (the submission and the
checker) runs with the job's own interpreter (`sys.executable`, a python3).

The driver gets the tests on its stdin, never as files, and writes a test's expected output and the checker only
after the program of that test has exited, into a directory of a random name, and runs the checker with `-I`
(nothing the program wrote can stand in for the checker or a module it imports). The program runs under a seccomp
filter that refuses fork (threads and exec work; no process of its own outlives it to touch a later test's files),
with its address space limited to `memory_limit`.
The driver is not dumpable and its result line carries a nonce the program never sees, so a program cannot report
a verdict of its own. A driver that dies without a result (killed by its time limit, say) scores as if no test
passed.
"""

from __future__ import annotations

import concurrent.futures
import json
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grpo_open_r1 import extract_code
from grpo_reward_base import as_float, check_params, completion_text, is_num
from grpo_sandbox import run_sandboxed
from grpo_seccomp import build as seccomp_build

SCORING_MODES = ("pass_fail", "partial", "weighted_sum")
LANGUAGES = ("cpp", "python")
COMPILE = ("g++", "-std=c++17", "-O2", "-o", "main", "main.cpp")
# Where seccomp is not supported (not x86_64) the program gets RLIMIT_NPROC 0 instead.
NO_FORK = seccomp_build(allow_fork=False, allow_exec=True, sockets="none")

# Runs inside the sandbox: reads {"nonce", "code", "language", "tests", ...} as JSON on stdin, prints
# "<nonce> {result}" as its last line. Kept free of this module's names: it is the whole program there.
DRIVER = r"""
import ctypes, json, os, resource, shutil, subprocess, sys, tempfile

job = json.loads(sys.stdin.read())
try:  # not dumpable: a submission (same uid) cannot read this process's memory or open its fds in /proc
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
except (AttributeError, OSError):
    pass
nonce = job.pop("nonce")
here = os.getcwd()


def report(**result):
    print(nonce, json.dumps(result), flush=True)
    sys.exit(0)


class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def limits(memory_mb, program):
    def apply():
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        limit = memory_mb << 20 if hard == resource.RLIM_INFINITY else min(memory_mb << 20, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        if program is None:
            resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
            return
        libc = ctypes.CDLL(None, use_errno=True)
        buf = ctypes.create_string_buffer(program, len(program))
        prog = Fprog(len(program) // 8, ctypes.addressof(buf))
        # PR_SET_NO_NEW_PRIVS, then PR_SET_SECCOMP with a filter; the program never runs without it
        if libc.prctl(38, 1, 0, 0, 0) < 0 or libc.prctl(22, 2, ctypes.byref(prog), 0, 0) < 0:
            os._exit(121)
    return apply


no_fork = bytes.fromhex(job["seccomp"]) if job["seccomp"] else None


if job["language"] == "cpp":
    with open("main.cpp", "w") as f:
        f.write(job["code"])
    try:
        build = subprocess.run(job["compile"], capture_output=True, timeout=job["compile_timeout_s"])
        compiled = build.returncode == 0
    except subprocess.TimeoutExpired:
        compiled = False
    if not compiled:
        report(compile_error=True, passed=0, ran=0)
    os.remove("main.cpp")
    command = [os.path.join(here, "main")]
else:
    with open("main.py", "w") as f:
        f.write(job["code"])
    command = [sys.executable, os.path.join(here, "main.py")]
checker = job["checker"] or None  # written for each test only after its program has exited (see judge)


def run_one(index, test):
    box = os.path.join(here, f"t{index}")
    os.mkdir(box)
    try:
        file_mode = job["input_mode"] == "file"
        with open(os.path.join(box, "input.txt"), "w") as f:
            f.write(test["input"])
        try:
            proc = subprocess.run(
                command,
                input=b"" if file_mode else test["input"].encode(),
                capture_output=True,
                cwd=box,
                timeout=job["time_limit"],
                preexec_fn=limits(job["memory_limit"], no_fork),
                env={"PATH": "/usr/bin:/bin", "HOME": box, "LANG": "C.UTF-8"},
            )
        except subprocess.TimeoutExpired:
            return False
        if proc.returncode != 0:
            return False
        if file_mode:
            try:
                with open(os.path.join(box, "output.txt"), "rb") as f:
                    output = f.read()
            except OSError:
                return False
        else:
            output = proc.stdout
        output = output.decode("utf-8", "replace")
        if checker is None:
            return output.split() == test["output"].split()
        return judge(test, output)
    finally:
        shutil.rmtree(box, ignore_errors=True)


def judge(test, output):
    # A directory of a name the program could not guess, made after it exited, and `-I` (no script directory or
    # user site on sys.path): nothing the program wrote can stand in for the checker or a module it imports.
    room = tempfile.mkdtemp(dir=here)
    try:
        for name, text in (
            ("checker.py", checker),
            ("input.txt", test["input"]),
            ("correct_output.txt", test["output"]),
            ("solution_output.txt", output),
        ):
            with open(os.path.join(room, name), "w") as f:
                f.write(text)
        try:
            verdict = subprocess.run(
                [sys.executable, "-I", "checker.py", "input.txt", "correct_output.txt", "solution_output.txt"],
                capture_output=True,
                cwd=room,
                timeout=job["checker_timeout_s"],
            )
        except subprocess.TimeoutExpired:
            return False
        tokens = verdict.stdout.decode("utf-8", "replace").split()
        try:
            score = float(tokens[0]) if tokens else 0.0
        except ValueError:
            score = 0.0
        return verdict.returncode == 0 and score >= 1
    finally:
        shutil.rmtree(room, ignore_errors=True)


tests, size = job["tests"], job["batch"]
batches = [tests[i : i + size] for i in range(0, len(tests), size)] if size >= 1 else [tests]
passed = ran = 0
for batch in batches:
    results = [run_one(ran + i, t) for i, t in enumerate(batch)]
    ran += len(batch)
    passed += sum(results)
    if job["stop_on_failure"] and not all(results):
        break
report(compile_error=False, passed=passed, ran=ran)
"""


def problem_tests(official: Any, generated: Any) -> list[dict[str, str]]:
    """The official tests then the generated ones when those are a list (an int count counts as none)."""
    tests = [*(official if isinstance(official, list) else []), *(generated if isinstance(generated, list) else [])]
    return [{"input": str(t.get("input", "")), "output": str(t.get("output", ""))} for t in tests]


def score(passed: int, total: int, scoring_mode: str) -> float:
    """open-r1's score_submission for `passed` of `total` tests."""
    all_passed = 1.0 if passed == total else 0.0
    if scoring_mode == "pass_fail":
        return all_passed
    if scoring_mode == "partial":
        return passed / total
    return all_passed + 0.1 * passed / total


def _cf_code_reward(
    test_batch_size: int = -1,
    scoring_mode: str = "weighted_sum",
    no_compile_reward: float = -0.1,
    no_submission_reward: float = -1.0,
    compile_timeout_s: float = 30.0,
    checker_timeout_s: float = 10.0,
    compile_memory_mb: int = 2048,
    workers: int = 2,
) -> Callable[..., list[float | None]]:
    no_compile_reward, no_submission_reward = as_float(no_compile_reward), as_float(no_submission_reward)
    compile_timeout_s, checker_timeout_s = as_float(compile_timeout_s), as_float(checker_timeout_s)
    check_params(
        "open_r1_cf_code",
        (
            "test_batch_size",
            test_batch_size,
            isinstance(test_batch_size, int)
            and not isinstance(test_batch_size, bool)
            and (test_batch_size == -1 or test_batch_size >= 1),
            "-1 (all tests at once) or a positive integer",
        ),
        ("scoring_mode", scoring_mode, scoring_mode in SCORING_MODES, f"one of {', '.join(SCORING_MODES)}"),
        ("no_compile_reward", no_compile_reward, is_num(no_compile_reward), "a number"),
        ("no_submission_reward", no_submission_reward, is_num(no_submission_reward), "a number"),
        (
            "compile_timeout_s",
            compile_timeout_s,
            is_num(compile_timeout_s) and 0 < compile_timeout_s <= 600,
            "seconds in (0, 600]",
        ),
        (
            "checker_timeout_s",
            checker_timeout_s,
            is_num(checker_timeout_s) and 0 < checker_timeout_s <= 600,
            "seconds in (0, 600]",
        ),
        (
            "compile_memory_mb",
            compile_memory_mb,
            isinstance(compile_memory_mb, int) and compile_memory_mb >= 256,
            "an integer >= 256",
        ),
        ("workers", workers, isinstance(workers, int) and 1 <= workers <= 64, "an integer in 1..64"),
    )

    def one(text: str, row: dict[str, Any]) -> float | None:
        tests = problem_tests(row.get("official_tests"), row.get("generated_tests"))
        if not tests:
            return None
        language = row.get("language")
        code = extract_code(text, str(language)) if language in LANGUAGES else ""
        if not code:
            return float(no_submission_reward)
        time_limit = float(row.get("time_limit") or 2.0)
        memory_limit = int(row.get("memory_limit") or 256)
        nonce = secrets.token_hex(16)
        job = {
            "nonce": nonce,
            "code": code,
            "language": language,
            "tests": tests,
            "checker": row.get("generated_checker") or "",
            "time_limit": time_limit,
            "memory_limit": memory_limit,
            "input_mode": "file" if row.get("input_mode") == "file" else "stdio",
            "batch": test_batch_size,
            "stop_on_failure": scoring_mode == "pass_fail",
            "compile": list(COMPILE),
            "seccomp": NO_FORK.hex() if NO_FORK else "",
            "compile_timeout_s": float(compile_timeout_s),
            "checker_timeout_s": float(checker_timeout_s),
        }
        per_test = time_limit + (float(checker_timeout_s) if job["checker"] else 0.0) + 1.0
        res = run_sandboxed(
            DRIVER,
            stdin=json.dumps(job),
            timeout_s=float(compile_timeout_s) + len(tests) * per_test + 10.0,
            memory_mb=max(int(compile_memory_mb), memory_limit + 256),
            allow_subprocess=True,
        )
        lines = [ln for ln in res.stdout.splitlines() if ln.startswith(f"{nonce} ")]
        if not lines:
            return score(0, len(tests), scoring_mode)
        result = json.loads(lines[-1].split(" ", 1)[1])
        if result["compile_error"]:
            return float(no_compile_reward)
        return score(int(result["passed"]), len(tests), scoring_mode)

    def reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        columns = (
            "language",
            "official_tests",
            "generated_tests",
            "generated_checker",
            "time_limit",
            "memory_limit",
            "input_mode",
        )
        n = len(completions)
        rows = [{c: (kwargs[c][i] if kwargs.get(c) is not None else None) for c in columns} for i in range(n)]
        texts = [completion_text(c) for c in completions]
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(one, texts, rows))

    return reward


def cf_rewards(define: Callable[..., Any]) -> list[Any]:
    """open-r1's cf_code as a `grpo_rewards.RewardDef` (`define` is grpo_rewards' own constructor)."""
    return [
        define(
            "open_r1_cf_code",
            _cf_code_reward,
            "code",
            "open-r1's `cf_code` reward (Codeforces): the last ```cpp or ```python block (the row's `language`) "
            "compiled (g++ -std=c++17 -O2) and judged in the sandbox on the row's official and generated tests, "
            "with its checker if any; weighted_sum = all passed + 0.1 × fraction (-0.1 compile error, -1 no code).",
            {
                "test_batch_size": (-1, "tests judged per batch; pass_fail stops after a failing batch (-1: all)"),
                "scoring_mode": ("weighted_sum", "pass_fail, partial or weighted_sum (open-r1's default)"),
                "no_compile_reward": (-0.1, "the reward of a submission that does not compile"),
                "no_submission_reward": (-1.0, "the reward of a completion without a code block"),
                "compile_timeout_s": (30.0, "seconds g++ may take"),
                "checker_timeout_s": (10.0, "seconds the problem's checker may take per test"),
                "compile_memory_mb": (2048, "address-space limit of the driver and g++"),
                "workers": (2, "completions judged in parallel"),
            },
            ("language", "official_tests"),
        )
    ]
