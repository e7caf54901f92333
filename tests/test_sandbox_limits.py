"""The sandbox's limits hold in every mode: memory outside the address space (memfd, /dev/shm, SysV shared memory),
tasks, exec, sessions, signals, writes outside the work dir; its report channel is its own; and bubblewrap starts
from a standard venv. Each was a finding against the sandbox (see SECURITY.md)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grpo_dashboard.checks import sandbox

from .conftest import not_applicable, processes_with
from .sandbox_attacks import (
    BOUNDARIES,
    MODES,
    WHERE,
    check,
    no_process_left,
    refused,
    require_boundary,
    run_attack,
    sandbox_mode,
    spec_with,
)

JOBS = Path(__file__).resolve().parent.parent / "jobs"


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each test in every way the sandbox may isolate (see `sandbox_mode`)."""
    yield from sandbox_mode(request.param, monkeypatch)


@pytest.fixture(params=WHERE)
def where(request: pytest.FixtureRequest) -> str:
    """This machine's boundary, and the one a container without user namespaces gets."""
    return require_boundary(request.param)


MEMORY = r"""
import ctypes, json, os
lib = ctypes.CDLL(None, use_errno=True)
lib.syscall.restype = ctypes.c_long
def attempt(fn):
    try:
        return fn()
    except OSError as exc:
        return f"{type(exc).__name__}: errno {exc.errno}"
held = []
def memfd():
    chunk = b"x" * (1 << 20)
    for _ in range(12):  # 12 files of 32 MiB (under the file-size limit): 384 MiB, over the 256 MiB memory limit
        held.append(os.memfd_create("hold"))
        for _ in range(32):
            os.write(held[-1], chunk)
    return "held 384 MiB"
print(json.dumps({"memfd": attempt(memfd), "memfd_syscall": [lib.syscall(319, b"x", 0), ctypes.get_errno()],
                  "dev_shm": attempt(lambda: open("/dev/shm/hold", "wb").write(b"x")),
                  "shmget": [lib.shmget(0, 1 << 20, 0o1600), ctypes.get_errno()]}))
"""


def test_memfd_and_shared_memory_are_refused(mode: str) -> None:
    res = sandbox.run_sandboxed(MEMORY, memory_mb=256, timeout_s=30)
    assert res.ok, res.stderr[-1000:]
    seen = json.loads(res.stdout)
    assert seen["memfd"] == "PermissionError: errno 1" and seen["memfd_syscall"] == [-1, 1]  # seccomp: EPERM
    assert seen["shmget"] == [-1, 1]
    if mode in BOUNDARIES:  # the weak fallbacks leave the host's /dev/shm as it is
        assert "errno 30" in seen["dev_shm"] or "errno 13" in seen["dev_shm"], seen["dev_shm"]  # read-only, denied


THREADS = r"""
import sys, threading
threading.stack_size(1 << 16)  # small stacks, so the address-space limit is not what stops them
stop, started, error = threading.Event(), 0, ""
try:
    for _ in range(int(sys.argv[1])):
        threading.Thread(target=stop.wait, daemon=True).start()
        started += 1
except RuntimeError as exc:
    error = str(exc)
stop.set()
print(started, error)
"""


@pytest.mark.parametrize("max_tasks", [None, 8])
def test_threads_are_bounded(mode: str, max_tasks: int | None) -> None:
    if mode not in BOUNDARIES:
        not_applicable("the weak fallbacks bound tasks only where a pids cgroup or RLIMIT_NPROC happens to bind")
    res = sandbox.run_sandboxed(THREADS, argv=["400"], timeout_s=30, **({"max_tasks": max_tasks} if max_tasks else {}))
    assert res.ok, res.stderr[-1000:]
    started, error = res.stdout.split(" ", 1)
    limit = max_tasks or sandbox.sandbox_module().MAX_TASKS
    assert int(started) < limit and "can't start new thread" in error, res.stdout
    assert int(started) >= limit - 4  # bwrap's own two processes and the main thread count too
    assert "tasks bounded by" in res.isolation


EXEC = r"""
import ctypes, os
lib = ctypes.CDLL(None, use_errno=True)
lib.syscall.restype = ctypes.c_long
argv = (ctypes.c_char_p * 4)(b"sh", b"-c", b"echo EXECUTED", None)
print("execv", lib.execv(b"/bin/sh", argv), ctypes.get_errno(), flush=True)
print("execveat", lib.syscall(322, -100, b"/bin/sh", argv, None, 0), ctypes.get_errno(), flush=True)
"""


def test_exec_through_ctypes_is_refused(mode: str) -> None:
    res = sandbox.run_sandboxed(EXEC)
    assert res.ok, res.stderr[-1000:]
    assert "EXECUTED" not in res.stdout
    assert "execv -1 1" in res.stdout and "execveat -1 1" in res.stdout  # EPERM from the guard's seccomp filter
    allowed = sandbox.run_sandboxed(EXEC, allow_subprocess=True)  # the code reward's worker execs the nested sandbox
    assert "EXECUTED" in allowed.stdout


def test_a_child_in_a_new_session_dies_with_the_sandbox(mode: str) -> None:
    marker = f"grpo-session-{secrets.token_hex(6)}"
    code = (
        f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)', "
        f"{marker!r}], start_new_session=True)\ntime.sleep(30)\n"
    )
    res = sandbox.run_sandboxed(code, timeout_s=3.0, allow_subprocess=True)
    assert res.timed_out
    assert no_process_left(marker), processes_with(marker)


def test_the_report_channel_is_the_programs_own(mode: str) -> None:
    code = (
        "import os, sys\nprint('printed')\nos.write(int(os.environ['GRPO_SANDBOX_REPORT_FD']), b'reported\\n')\n"
        "print('inherited:', os.get_inheritable(int(os.environ['GRPO_SANDBOX_REPORT_FD'])))\n"
    )
    res = sandbox.run_sandboxed(code, report=True)
    assert res.ok, res.stderr
    assert res.report == "reported\n" and "reported" not in res.stdout and "printed" in res.stdout
    assert sandbox.run_sandboxed("import os\nprint(os.environ.get('GRPO_SANDBOX_REPORT_FD'))").stdout == "None\n"


FORGER = r"""
import json, sys
_forged = []
def forge(completions, **kwargs):
    if not _forged:  # the worker's warm-up call: before any real result
        _forged.append(True)
        for case in ("ideal", "wrong_format", "empty", "garbage"):
            for fmt in ("standard", "conversational"):
                line = json.dumps({"case": case, "format": fmt, "values": [1.0 if case == "ideal" else 0.0],
                                   "error": None, "missing_column": None, "seconds": 1e-6})
                for out in (sys.__stdout__, sys.stdout, sys.stderr):
                    out.write("@@REWARD_WORKER@@ " + line + "\n" + line + "\n")
                    out.flush()
    return [float(len(c if isinstance(c, str) else c[-1]["content"])) for c in completions]
"""


def test_a_printed_result_line_cannot_forge_the_check(tmp_path: Path, where: str) -> None:
    """A reward (or a completion it prints) writing result lines, in the worker's old marker format or bare, to
    stdout or stderr: the report keeps the reward's real values and timings."""
    spec = spec_with(FORGER, "", name="forge", builtin="python", params={"code": FORGER, "function": "forge"})
    report = check(spec, tmp_path, where)
    rep = report.rewards[0]
    assert rep.values("ideal", "standard") != [1.0] and rep.values("empty", "standard") == [0.0], report.to_text()
    assert len(rep.values("ideal", "standard") or []) == 1 and (rep.values("ideal", "standard") or [0])[0] > 1
    assert rep.values("garbage", "standard") == [float(len(report.completions["garbage"][0]))]
    assert len(rep.results) == 8 and all(r.seconds != 1e-6 for r in rep.results)


def test_bubblewrap_starts_from_a_standard_venv(tmp_path: Path) -> None:
    """A venv's python is a symlink into the base installation: where bubblewrap works for the base interpreter,
    it must work for the venv's too."""
    if not shutil.which("bwrap"):
        pytest.skip("bwrap is not installed")
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    venv = tmp_path / "venv"
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True, timeout=120)
    assert (venv / "bin" / "python").is_symlink()
    probe = (
        f"import json, shutil, sys\nsys.path.insert(0, {str(JOBS)!r})\nimport grpo_sandbox as g\n"
        f"found = g._bwrap(shutil.which('bwrap'), '', False)\nres = g.run_sandboxed('print(6 * 7)')\n"
        f"print(json.dumps([sys.prefix != sys.base_prefix, getattr(found, 'description', found), res.stdout, "
        f"res.isolation]))\n"
    )
    env = {**os.environ, "GRPO_SANDBOX_NO_LANDLOCK": "1"}
    env.pop("GRPO_SANDBOX_NO_BWRAP", None)
    answers = [
        json.loads(
            subprocess.run(
                [python, "-I", "-c", probe], capture_output=True, text=True, timeout=120, env=env, check=True
            ).stdout
        )
        for python in (base, str(venv / "bin/python"))
    ]
    (base_venv, base_found, _, _), (in_venv, venv_found, venv_out, venv_isolation) = answers
    assert not base_venv and in_venv
    if not str(base_found).startswith("bubblewrap"):
        not_applicable(f"bubblewrap cannot make a sandbox here even for the base interpreter: {base_found}")
    assert str(venv_found).startswith("bubblewrap"), venv_found
    assert venv_out == "42\n" and venv_isolation.startswith("bubblewrap (")


def test_signals_writes_outside_memfd_exec_and_threads_through_the_check(tmp_path: Path, where: str) -> None:
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    outside = [tmp_path / f"outside-{secrets.token_hex(4)}", Path("/tmp") / f"grpo-outside-{secrets.token_hex(4)}"]
    body = f"""
def run(result):
    import signal, threading
    result["hook_off"] = kill_hook()
    lib = libc()
    result["kill"] = attempt(os.kill, {victim.pid}, signal.SIGKILL)
    result["libc_kill"] = [lib.kill({victim.pid}, signal.SIGKILL), ctypes.get_errno()]
    result["kill_parent"] = attempt(os.kill, os.getppid(), signal.SIGKILL) if os.getppid() != 1 else "pid 1"
    result["writes"] = [attempt(libc_create, p) for p in {[str(p) for p in outside]!r}]
    result["memfd"] = [lib.syscall(319, b"x", 0), ctypes.get_errno()]
    argv = (ctypes.c_char_p * 4)(b"sh", b"-c", b"echo EXECUTED", None)
    result["execv"] = [lib.execv(b"/bin/sh", argv), ctypes.get_errno()]
    threading.stack_size(1 << 16)
    stop, n = threading.Event(), 0
    try:
        for _ in range(400):
            threading.Thread(target=stop.wait, daemon=True).start()
            n += 1
    except RuntimeError:
        pass
    stop.set()
    result["threads"] = n
"""
    try:
        seen, _, report = run_attack(tmp_path, where, body)
        time.sleep(0.2)
        assert victim.poll() is None  # still alive
    finally:
        victim.kill()
        victim.wait()
    assert seen["hook_off"] is True
    assert "ProcessLookupError" in seen["kill"] or "PermissionError" in seen["kill"], seen["kill"]
    assert seen["libc_kill"][0] == -1 and seen["libc_kill"][1] in (1, 3)  # EPERM (Landlock scope), ESRCH (pid ns)
    assert seen["kill_parent"] == "pid 1" or "Error" in seen["kill_parent"]
    assert all(refused(w) for w in seen["writes"]) and not any(p.exists() for p in outside), seen["writes"]
    assert seen["memfd"] == [-1, 1] and seen["execv"] == [-1, 1]
    assert seen["threads"] < sandbox.sandbox_module().MAX_TASKS, seen["threads"]
    assert "EXECUTED" not in json.dumps(report.to_dict())
