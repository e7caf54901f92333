"""A sandbox for running untrusted Python (completions' code, users' reward code): a subprocess with time and memory
limits, a minimal environment without secrets, a temporary working directory and no network (Linux namespaces via
`unshare` where available, plus an audit hook as defence in depth). Also the unit-test harness of the code reward.

Ships beside `grpo_job.py` and `grpo_rewards.py`; imports nothing from `grpo_dashboard`.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# ---------------------------------------------------------------- sandbox

@dataclass
class SandboxResult:
    """What a sandboxed run produced. `ok` is a clean exit within the time limit."""

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float
    isolation: str

    @property
    def ok(self) -> bool:
        """True when the program exited with status 0 before the time limit."""
        return self.returncode == 0 and not self.timed_out

    @property
    def memory_exceeded(self) -> bool:
        """True when the program ran out of its memory limit."""
        return "MemoryError" in self.stderr or "Cannot allocate memory" in self.stderr


# Runs first in the child: limits, then an audit hook (network, process spawning, secret files), then the program.
# Audit hooks are defence in depth, not a jail; the namespaces added by `unshare` (when available) are the barrier.
_GUARD = r'''
import json, os, re, resource, runpy, sys
cfg = json.loads(sys.argv[1])
def _limit(res, soft, hard):
    cur_soft, cur_hard = resource.getrlimit(res)
    if cur_hard != resource.RLIM_INFINITY:
        soft, hard = min(soft, cur_hard), min(hard, cur_hard)
    try:
        resource.setrlimit(res, (soft, hard))
    except (ValueError, OSError):
        pass
if cfg["memory"]:
    _limit(resource.RLIMIT_AS, cfg["memory"], cfg["memory"])
_limit(resource.RLIMIT_CPU, cfg["cpu"], cfg["cpu"] + 2)
_limit(resource.RLIMIT_FSIZE, cfg["fsize"], cfg["fsize"])
_limit(resource.RLIMIT_CORE, 0, 0)
_deny = [re.compile(p) for p in cfg["deny"]]
_block = frozenset(cfg["block"])
_proc = re.compile(r"^/proc/(\d+)(?:/|$)")
_me, _realpath, _fsdecode = str(os.getpid()), os.path.realpath, os.fsdecode
def _hook(event, args):
    if event == "open":
        if isinstance(args[0], (str, bytes)):
            p = _realpath(_fsdecode(args[0]))
            m = _proc.match(p)
            if (m and m.group(1) != _me) or any(d.match(p) for d in _deny):
                raise PermissionError(f"sandbox: reading {p} is not allowed")
    elif event == "socket.__new__":
        if args[1] != 1:
            raise PermissionError("sandbox: network access is disabled")
    elif event in _block and not (event == "ctypes.dlopen" and args[0] is None):
        raise PermissionError(f"sandbox: {event} is not allowed")
sys.addaudithook(_hook)
sys.path[:0] = cfg["path"]
sys.argv = [cfg["main"], *cfg["argv"]]
del cfg, _limit
runpy.run_path(sys.argv[0], run_name="__main__")
'''
_SPAWN_EVENTS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
                 "ctypes.dlopen")
_SECRET_FILES = (".cache/huggingface", ".huggingface", ".netrc", ".ssh", ".aws", ".azure", ".config/gcloud",
                 ".config/gh", ".git-credentials", ".docker", ".pypirc", ".kaggle")
_UNSHARE = (("--net", "--pid", "--fork", "--mount-proc", "--kill-child"), ("--net", "--pid", "--fork", "--mount-proc"),
            ("--map-root-user", "--net", "--pid", "--fork", "--mount-proc"), ("--net",), ("--map-root-user", "--net"))


@functools.cache
def isolation_prefix() -> tuple[str, ...]:
    """The `unshare` command that gives the child its own network (and pid) namespace here, or () if none works."""
    tool = shutil.which("unshare")
    if not sys.platform.startswith("linux") or not tool or os.environ.get("GRPO_SANDBOX_NO_UNSHARE"):
        return ()
    for flags in _UNSHARE:
        try:
            if subprocess.run([tool, *flags, "true"], capture_output=True, timeout=10).returncode == 0:
                return (tool, *flags)
        except (OSError, subprocess.SubprocessError):
            continue
    return ()


def _deny_patterns() -> list[str]:
    homes = {os.path.realpath(os.path.expanduser("~"))}
    if os.environ.get("HOME"):
        homes.add(os.path.realpath(os.environ["HOME"]))
    alts = "|".join(re.escape(p) for p in _SECRET_FILES)
    pats = [rf"^{re.escape(h.rstrip('/'))}/(?:{alts})(?:/|$)" for h in homes]
    for var in ("HF_HOME", "HF_TOKEN_PATH", "HF_STORED_TOKENS_PATH"):
        if os.environ.get(var):
            path = os.path.realpath(os.environ[var])
            tail = "/(?:token|stored_tokens)" if var == "HF_HOME" else ""
            pats.append(rf"^{re.escape(path)}{tail}$")
    return pats + [r"^/run/secrets(?:/|$)"]


def sandbox_env(home: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The child's whole environment: a PATH, a temporary HOME, UTF-8; nothing inherited (no tokens, no proxies)."""
    path = os.pathsep.join(dict.fromkeys([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]))
    return {"PATH": path, "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1", **(extra or {})}


def run_sandboxed(code: str, *, stdin: str = "", timeout_s: float = 10.0, memory_mb: int | None = 512,
                  files: dict[str, str] | None = None, argv: list[str] | None = None, allow_subprocess: bool = False,
                  sys_path: list[str] | None = None, env: dict[str, str] | None = None,
                  max_output: int = 1_000_000) -> SandboxResult:
    """Run Python `code` in a sandboxed subprocess and return its exit status and output.

    The child gets: a fresh temporary working directory (holding `files`), a minimal environment, an address-space
    limit of `memory_mb`, a wall-clock limit of `timeout_s` (its whole process group is killed), no network (own
    network namespace via `unshare` when available, and sockets refused by an audit hook), no subprocesses unless
    `allow_subprocess`, and no reads of other processes' /proc entries or of token files (~/.cache/huggingface,
    ~/.netrc, ~/.ssh...).
    """
    with tempfile.TemporaryDirectory(prefix="grpo-sandbox-") as work, \
            tempfile.TemporaryDirectory(prefix="grpo-sandbox-io-") as io_dir:
        for name, content in (files or {}).items():
            target = Path(work) / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8")
        main = Path(work) / "main.py"
        main.write_text(code, encoding="utf-8")
        guard = Path(io_dir) / "guard.py"
        guard.write_text(_GUARD, encoding="utf-8")
        (Path(io_dir) / "stdin").write_text(stdin, encoding="utf-8")
        cfg = {"memory": int(memory_mb) * 2**20 if memory_mb else 0, "cpu": int(math.ceil(timeout_s)) + 1,
               "fsize": max(4 * max_output, 64 * 2**20), "deny": _deny_patterns(), "path": list(sys_path or []),
               "block": [] if allow_subprocess else list(_SPAWN_EVENTS), "main": str(main), "argv": list(argv or [])}
        prefix = isolation_prefix()
        cmd = [*prefix, sys.executable, "-I", str(guard), json.dumps(cfg)]
        start = time.monotonic()
        timed_out = False
        with open(Path(io_dir) / "stdin", "rb") as fin, open(Path(io_dir) / "out", "wb") as fout, \
                open(Path(io_dir) / "err", "wb") as ferr:
            proc = subprocess.Popen(cmd, stdin=fin, stdout=fout, stderr=ferr, cwd=work, start_new_session=True,
                                    env=sandbox_env(work, env))
            try:
                returncode: int | None = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_group(proc.pid)
                returncode = proc.wait()
        duration = time.monotonic() - start
        out = (Path(io_dir) / "out").read_bytes()[:max_output].decode("utf-8", errors="replace")
        err = (Path(io_dir) / "err").read_bytes()[-max_output:].decode("utf-8", errors="replace")
    isolation = "unshare " + " ".join(prefix[1:]) if prefix else "audit hook only"
    return SandboxResult(None if timed_out else returncode, out, err, timed_out, duration, isolation)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# ---------------------------------------------------------------- code tests

_HARNESS = r'''
import json, sys
nonce = sys.stdin.readline().strip()
tests = json.loads(sys.stdin.read())
out = sys.stdout
def report(obj):
    out.write(nonce + json.dumps(obj) + "\n")
    out.flush()
ns = {"__name__": "solution"}
try:
    with open("solution.py", encoding="utf-8") as f:
        exec(compile(f.read(), "solution.py", "exec"), ns)
except BaseException as exc:
    report({"loaded": False, "error": f"{type(exc).__name__}: {exc}"[:300]})
    raise SystemExit(0)
for i, test in enumerate(tests):
    try:
        exec(compile(test, f"test_{i}", "exec"), ns)
        report({"i": i, "ok": True})
    except BaseException as exc:
        report({"i": i, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]})
'''


def _same_output(got: str, want: str) -> bool:
    norm = lambda s: "\n".join(line.rstrip() for line in s.strip().splitlines())  # noqa: E731
    return norm(got) == norm(want)


def run_tests(code: str, kind: str, tests: list[Any], timeout_s: float = 5.0, memory_mb: int = 512) -> float:
    """Fraction of `tests` the program passes, each run in the sandbox (asserts together, io cases one by one)."""
    if not tests:
        return 0.0
    if kind == "io":
        passed = 0
        for stdin, expected in tests:
            res = run_sandboxed(code, stdin=stdin, timeout_s=timeout_s, memory_mb=memory_mb)
            passed += res.ok and _same_output(res.stdout, expected)
        return passed / len(tests)
    nonce = secrets.token_hex(16)
    res = run_sandboxed(_HARNESS, stdin=nonce + "\n" + json.dumps(tests), files={"solution.py": code},
                        timeout_s=timeout_s, memory_mb=memory_mb)
    oks: set[int] = set()
    for line in res.stdout.splitlines():
        if line.startswith(nonce):
            record = json.loads(line[len(nonce):])
            if record.get("ok"):
                oks.add(int(record["i"]))
    return len(oks) / len(tests)
