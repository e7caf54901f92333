"""Shared by the sandbox's escape tests: the attack prelude, running the reward check on an attack either here or in
a child process under a container-like seccomp profile (no user namespaces, as Docker's default profile), and the
rule that turns "no boundary here" into a failure where one is expected (GRPO_DASHBOARD_EXPECT_SANDBOX=1, set in CI).
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grpo_dashboard.checks import sandbox
from grpo_dashboard.checks.reward_check import CheckReport, check_rewards

from .conftest import not_applicable, processes_with

REPO = Path(__file__).resolve().parent.parent
MATH = REPO / "examples" / "data" / "math_tiny.jsonl"
EXPECT_ENV = "GRPO_DASHBOARD_EXPECT_SANDBOX"
MODES = ["bwrap", "landlock", "unshare", "audit-hook"]  # how run_sandboxed may isolate (see `sandbox_mode`)
BOUNDARIES = ("bwrap", "landlock")
WHERE = ["here", "container"]  # the boundary this machine gives, and the one a container without user namespaces gives

# Shared by every attack: switch the guard's audit hook off (find it with gc, replace its code), raw libc reads and
# writes through ctypes (no audit events), and a wrapper that turns any failure into its message.
PRELUDE = r'''
import ctypes, gc, json, os, sys
def kill_hook():
    n = 0
    for o in gc.get_objects():
        if getattr(o, "__name__", "") == "_hook" and hasattr(o, "__code__"):
            o.__code__ = (lambda event, args: None).__code__
            n += 1
    try:
        ctypes.CDLL("libc.so.6")
        return n > 0
    except Exception:
        return False
def libc():
    lib = ctypes.CDLL(None, use_errno=True)
    lib.open.argtypes, lib.open.restype = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int], ctypes.c_int
    lib.syscall.restype = ctypes.c_long
    return lib
def libc_read(path):
    lib = libc()
    fd = lib.open(path.encode(), os.O_RDONLY, 0)
    if fd < 0:
        return f"errno {ctypes.get_errno()}"
    buf = ctypes.create_string_buffer(1 << 20)
    n = lib.read(fd, buf, 1 << 20)
    lib.close(fd)
    return buf.raw[:max(n, 0)].decode("latin-1")
def libc_create(path):
    fd = libc().open(path.encode(), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    return f"errno {ctypes.get_errno()}" if fd < 0 else "created"
def attempt(fn, *args):
    try:
        return fn(*args)
    except BaseException as exc:
        return f"{type(exc).__name__}: {exc}"
def short(value):
    """Long reads keep their start and every secret-looking string in them (the report line must stay short)."""
    if not isinstance(value, str) or len(value) <= 120:
        return value
    import re
    return value[:60] + " ... " + " ".join(re.findall(r"(?:grpo-canary-|hf_|oauth-)[0-9a-f]{16,}", value))
def report(result):
    print("ESCAPE" + json.dumps({k: short(v) for k, v in result.items()}, default=repr), flush=True)
'''

INLINE = (
    PRELUDE
    + r"""
_done = []
def attack(completions, **kwargs):
    if not _done:
        _done.append(True)
        result = {}
        try:
            run(result)
        except BaseException as exc:
            result["crashed"] = repr(exc)
        report(result)
    return [float(len(c if isinstance(c, str) else c[-1]["content"])) for c in completions]
"""
)

# Runs the check in a child process that first installs what a container's default seccomp profile does to
# namespaces (Docker's: unshare, setns and namespace flags on clone refused, clone3 ENOSYS), so bubblewrap cannot
# start there and the Landlock boundary must hold every attack alone.
_CONTAINER_RUNNER = r"""
import base64, ctypes, json, pickle, struct, sys
def insn(code, k, jt=0, jf=0):
    return struct.pack("<HBBI", code, jt, jf, k)
LD, JEQ, JSET, RET, ALLOW, ERRNO = 0x20, 0x15, 0x45, 0x06, 0x7FFF0000, 0x00050000
prog = [insn(LD, 0)]
for nr in (272, 308, 165):  # unshare, setns, mount
    prog += [insn(JEQ, nr, jf=1), insn(RET, ERRNO | 1)]
prog += [insn(JEQ, 435, jf=1), insn(RET, ERRNO | 38)]  # clone3
prog += [insn(JEQ, 56, jf=3), insn(LD, 16), insn(JSET, 0x7E020000, jf=1), insn(RET, ERRNO | 1), insn(RET, ALLOW)]
prog.append(insn(RET, ALLOW))
code = b"".join(prog)
class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
buf = ctypes.create_string_buffer(code, len(code))
fprog = Fprog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
lib = ctypes.CDLL(None, use_errno=True)
if lib.prctl(22, 2, ctypes.c_void_p(ctypes.addressof(fprog)), 0, 0) != 0:
    raise SystemExit(f"could not install the container profile: errno {ctypes.get_errno()}")
from grpo_dashboard.checks.reward_check import check_rewards
args = json.loads(sys.argv[1])
report = check_rewards(args["spec"], n_rows=1, base_dir=args["base"], timeout_s=60)
print("REPORT" + base64.b64encode(pickle.dumps(report)).decode())
"""


def require_boundary(where: str) -> str:
    """The boundary `where` gives; skips (or fails, with GRPO_DASHBOARD_EXPECT_SANDBOX=1) when none can be made."""
    if where == "container":
        abi = sandbox.sandbox_module().grpo_confine.landlock_abi()
        found = "" if abi >= 6 else f"Landlock ABI {abi} here; a container without user namespaces needs ABI 6"
    else:
        found = "" if sandbox.boundary() else sandbox.sandbox_module().no_boundary_reason()
    if found:
        if os.environ.get(EXPECT_ENV) == "1":
            pytest.fail(f"{EXPECT_ENV}=1 but {found}")
        pytest.skip(found)
    return where


def sandbox_mode(param: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Set the sandbox up for one mode of MODES: bubblewrap, Landlock (bubblewrap switched off), the `unshare`
    fallback or the audit hook alone (both boundaries switched off), each where available. A boundary mode that
    cannot run here is skipped (`not_applicable`) only while the other boundary can (the tests then run there);
    with neither, see `require_boundary`. For a test module's `mode` fixture:
    `yield from sandbox_mode(request.param, monkeypatch)`."""
    prefix = sandbox.sandbox_module().isolation_prefix
    if param != "bwrap":
        monkeypatch.setenv("GRPO_SANDBOX_NO_BWRAP", "1")
    if param in ("unshare", "audit-hook"):
        monkeypatch.setenv("GRPO_SANDBOX_NO_LANDLOCK", "1")
    if param == "audit-hook":
        monkeypatch.setenv("GRPO_SANDBOX_NO_UNSHARE", "1")
    prefix.cache_clear()
    if param in BOUNDARIES and sandbox.boundary() is None:
        monkeypatch.delenv("GRPO_SANDBOX_NO_BWRAP", raising=False)
        require_boundary("here")
        not_applicable(f"{param} cannot make a sandbox here; the other boundary ({sandbox.boundary()}) can")
    if param == "bwrap" and not (sandbox.boundary() or "").startswith("bubblewrap"):
        not_applicable(f"bubblewrap is not the boundary here ({sandbox.boundary()})")
    if param == "unshare" and not prefix():
        not_applicable("unshare namespaces are not available here")
    yield param
    prefix.cache_clear()


def check(spec: dict[str, Any], base: Path, where: str) -> CheckReport:
    """`check_rewards` on `spec`, in this process or in a child under the container profile."""
    if where == "here":
        return check_rewards(spec, n_rows=1, base_dir=base, timeout_s=60)
    out = subprocess.run(
        [sys.executable, "-c", _CONTAINER_RUNNER, json.dumps({"spec": spec, "base": str(base)})],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("REPORT")]
    assert lines, f"the container runner failed ({out.returncode}): {out.stderr[-3000:]}"
    report = pickle.loads(base64.b64decode(lines[-1][len("REPORT") :]))
    assert report.isolation.startswith("landlock ("), report.isolation  # bubblewrap really could not start there
    return report


def spec_with(code: str, body: str, **reward: Any) -> dict[str, Any]:
    """A spec over the tiny math data whose one reward is inline code: the prelude, `body` defining run(result)."""
    rewards = [
        reward or {"name": "attack", "builtin": "python", "params": {"code": code + body, "function": "attack"}}
    ]
    return {
        "name": "escape",
        "model": {"name_or_path": "tiny", "build_tiny": True},
        "dataset": {"data_files": str(MATH), "prompt_column": "question"},
        "rewards": rewards,
    }


def run_attack(tmp_path: Path, where: str, body: str, **reward: Any) -> tuple[dict[str, Any], str, CheckReport]:
    """Run the check on an attack; returns what the attack reported, everything the check produced, the report."""
    base = tmp_path / "base"
    base.mkdir(exist_ok=True)
    report = check(spec_with(INLINE, body, **reward), base, where)
    everything = json.dumps(report.to_dict())
    lines = [line for r in report.rewards for line in r.log_tail.splitlines() if line.startswith("ESCAPE")]
    assert lines, f"the attack did not run: {report.to_text()}\n{report.rewards[0].log_tail}"
    return json.loads(lines[-1][len("ESCAPE") :]), everything, report


def refused(value: Any) -> bool:
    """An attempt the boundary stopped: not there (bubblewrap's view) or denied (Landlock, seccomp, DAC)."""
    text = str(value)
    return text in ("errno 2", "errno 13", "errno 1", "errno 30") or any(
        e in text for e in ("FileNotFoundError", "PermissionError", "Read-only file system")
    )


def canary() -> str:
    """A secret that must never appear in anything the check produces."""
    return "grpo-canary-" + secrets.token_hex(12)


def no_process_left(marker: str, grace_s: float = 3.0) -> bool:
    """True once no host process has `marker` in its command line (waits up to `grace_s`)."""
    deadline = time.monotonic() + grace_s
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not processes_with(marker)


def tree_state(*dirs: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file under `dirs`, bytecode caches aside (other processes may write those)."""
    return {
        str(p): (p.stat().st_size, p.stat().st_mtime_ns)
        for d in dirs
        for p in sorted(d.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }
