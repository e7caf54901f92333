"""A sandbox for running untrusted Python (completions' code, users' reward code): a subprocess with time, memory,
task and open-file limits, a minimal environment without secrets and a temporary working directory.

Two boundaries, whichever holds here (probed once, see `boundary`):
- bubblewrap, where unprivileged user namespaces work: own user, pid, network, mount... namespaces, uid 65534
  without capabilities, a read-only view of only the system, Python and the given paths, a seccomp filter;
- Landlock, where they do not (a container whose seccomp profile refuses `unshare`, like Docker's default): no new
  privileges, a Landlock domain (read-only system, Python and given paths; the work dir writable; no TCP, no
  abstract Unix sockets or signals outside the domain), an unprivileged uid when the parent is root, a seccomp filter.
In both, the child's guard (`grpo_confine.py`) adds a second seccomp filter (no exec unless subprocesses are allowed,
no memfd or SysV shared memory) and bounds the tasks (RLIMIT_NPROC where it binds, a pids cgroup where one can be
made). Without either boundary: a weak fallback (`unshare` namespaces or the audit hook, plus the guard's limits)
that prints a warning. Also the unit-test harness of the code reward.

Ships beside `grpo_job.py` and `grpo_rewards.py` with its siblings `grpo_bwrap.py`, `grpo_confine.py` and
`grpo_seccomp.py`; imports nothing from `grpo_dashboard`.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
import grpo_bwrap  # noqa: E402
import grpo_confine  # noqa: E402
import grpo_host  # noqa: E402
import grpo_seccomp  # noqa: E402
from grpo_bwrap import SANDBOX_UID, SANDBOX_WORK  # noqa: E402 - re-exported

_CONFINE = Path(grpo_confine.__file__).read_text(encoding="utf-8")
# Joins the run's pids cgroup, then execs the sandbox, so every task of it is counted from the start.
_ENTER_CGROUP = (
    "import os, sys\nwith open(sys.argv[1] + '/cgroup.procs', 'w') as f:\n    f.write(str(os.getpid()))\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


@dataclass
class SandboxResult:
    """What a sandboxed run produced. `ok` is a clean exit within the time limit; `report` is what the program
    wrote to its report channel (fd `GRPO_SANDBOX_REPORT_FD`, when asked for with `report=True`)."""

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float
    isolation: str
    report: str = ""

    @property
    def ok(self) -> bool:
        """True when the program exited with status 0 before the time limit."""
        return self.returncode == 0 and not self.timed_out

    @property
    def memory_exceeded(self) -> bool:
        """True when the program ran out of its memory limit."""
        return "MemoryError" in self.stderr or "Cannot allocate memory" in self.stderr


_SPAWN_EVENTS = (
    "subprocess.Popen",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "ctypes.dlopen",
)
_SECRET_FILES = (
    ".cache/huggingface",
    ".huggingface",
    ".netrc",
    ".ssh",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".config/gh",
    ".git-credentials",
    ".docker",
    ".pypirc",
    ".kaggle",
)
_UNSHARE = (
    ("--net", "--pid", "--fork", "--mount-proc", "--kill-child"),
    ("--net", "--pid", "--fork", "--mount-proc"),
    ("--map-root-user", "--net", "--pid", "--fork", "--mount-proc"),
    ("--net",),
    ("--map-root-user", "--net"),
)
# The variable that tells a nested sandbox (the code reward run by the reward worker) that it already runs inside
# one; the switches that force the fallbacks (tests, and owners who want to see them); the report channel's fd.
_INSIDE_ENV = "GRPO_SANDBOX_INSIDE"
_NO_BWRAP_ENV = "GRPO_SANDBOX_NO_BWRAP"
_NO_LANDLOCK_ENV = "GRPO_SANDBOX_NO_LANDLOCK"
_NO_UNSHARE_ENV = "GRPO_SANDBOX_NO_UNSHARE"
REPORT_FD_ENV = "GRPO_SANDBOX_REPORT_FD"
MAX_TASKS = 64  # threads and processes of one sandbox; with subprocesses allowed (the code reward's worker runs
MAX_TASKS_WITH_SUBPROCESSES = 256  # up to 64 sandboxed programs at once, each with its threads) more
_NOFILE, _NOFILE_WITH_SUBPROCESSES = 256, 1024  # open files: also what bounds pipe and socket buffers
_LANDLOCK_ABI = 6  # scopes for abstract Unix sockets and signals: without them the domain leaks


@functools.cache
def isolation_prefix() -> tuple[str, ...]:
    """The `unshare` command that gives the child its own network (and pid) namespace here, or () if none works.

    Part of the weak fallback used when neither bubblewrap nor Landlock can make a boundary here.
    """
    tool = shutil.which("unshare")
    if not sys.platform.startswith("linux") or not tool or os.environ.get(_NO_UNSHARE_ENV) or _inside_boundary():
        return ()
    for flags in _UNSHARE:
        try:
            if subprocess.run([tool, *flags, "true"], capture_output=True, timeout=10).returncode == 0:
                return (tool, *flags)
        except (OSError, subprocess.SubprocessError):
            continue
    return ()


def seccomp_program(allow_subprocess: bool = False) -> bytes | None:
    """The seccomp filter bubblewrap installs before it starts Python (see `grpo_seccomp.outer_program`)."""
    return grpo_seccomp.outer_program(allow_subprocess)


# ---------------------------------------------------------------- choosing the boundary


@dataclass(frozen=True)
class _Plan:
    mode: str  # bubblewrap | landlock | nested | unshare | audit-hook
    description: str
    tool: str = ""
    outer_seccomp: bool = False
    disable_userns: bool = False
    cgroup: bool = False


def _task_bound(nproc: bool, cgroup: bool) -> str:
    ways = [w for w, on in (("RLIMIT_NPROC", nproc), ("a pids cgroup", cgroup)) if on]
    return "tasks bounded by " + " and ".join(ways) if ways else "tasks NOT bounded"


@functools.cache
def _bwrap(tool: str | None, disabled: str, inside: bool) -> _Plan | str:
    """The working bubblewrap configuration, or why there is none."""
    if disabled:
        return f"{_NO_BWRAP_ENV} is set"
    if inside or not sys.platform.startswith("linux"):
        return "not on Linux" if not inside else "already inside a sandbox"
    if not tool:
        return "bwrap is not installed"
    why = ""
    for seccomp, disable_userns in ((True, True), (True, False), (False, True), (False, False)):
        program = seccomp_program() if seccomp else None
        if seccomp and program is None:
            why = why or "no seccomp filter for this architecture"
            continue
        description, reason = grpo_bwrap.probe(tool, program, disable_userns, sandbox_env(SANDBOX_WORK))
        if description:
            cgroup = grpo_host.pids_cgroup_base() is not None
            return _Plan(
                "bubblewrap",
                f"{description}, {_task_bound(not grpo_host.root(), cgroup)})",
                tool,
                seccomp,
                disable_userns,
                cgroup,
            )
        why = why or reason
    return why


# Run once inside a candidate Landlock sandbox: what it can reach of the host must be refused.
_LANDLOCK_PROBE = r"""
import json, os, socket, sys, threading
outside, parent = sys.argv[1], int(sys.argv[2])
def attempt(fn):
    try:
        fn()
        return "allowed"
    except OSError as exc:
        return exc.errno
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
threading.stack_size(1 << 16)
started, stop = 0, threading.Event()
try:
    for _ in range(200):
        threading.Thread(target=stop.wait, daemon=True).start()
        started += 1
except RuntimeError:
    pass
stop.set()
print(json.dumps({"read": attempt(lambda: open(outside).read()), "environ": attempt(
    lambda: open(f"/proc/{parent}/environ", "rb").read()), "signal": attempt(lambda: os.kill(parent, 0)),
    "write": attempt(lambda: open(outside + ".new", "x").close()), "fork": attempt(os.fork),
    "inet": attempt(lambda: socket.socket(socket.AF_INET)), "uid": os.getuid(), "threads": started,
    "seccomp": status["Seccomp"].strip(), "nnp": status["NoNewPrivs"].strip()}))
"""


@functools.cache
def _landlock(disabled: str, inside: bool) -> _Plan | str:
    """The Landlock boundary when it can be made and holds here, or why not."""
    if disabled:
        return f"{_NO_LANDLOCK_ENV} is set"
    if inside:
        return "already inside a sandbox"
    abi = grpo_confine.landlock_abi()
    if abi < _LANDLOCK_ABI:
        return (
            f"Landlock ABI {abi} here, the boundary needs ABI {_LANDLOCK_ABI} (Linux 6.12+ with Landlock enabled)"
            if abi
            else "Landlock is not available (Linux 5.13+ with landlock in the lsm= list)"
        )
    if seccomp_program() is None:
        return "no seccomp filter for this architecture"
    cgroup = grpo_host.pids_cgroup_base() is not None
    root, keep = grpo_host.root(), grpo_host.has_read_search()
    who = (
        "a spare uid per run, no capabilities but CAP_DAC_READ_SEARCH"
        if root and keep
        else "a spare uid per run, no capabilities"
        if root
        else "the dashboard's uid, no capabilities"
    )
    plan = _Plan(
        "landlock",
        f"landlock (Landlock ABI {abi}: files, TCP, abstract Unix sockets, signals; seccomp, no "
        f"sockets; {who}; {_task_bound(True, cgroup)})",
        cgroup=cgroup,
    )
    with tempfile.TemporaryDirectory(prefix="grpo-sandbox-probe-") as outside:
        secret = Path(outside, "outside")
        secret.write_text("outside")
        res = _run(
            plan, _LANDLOCK_PROBE, argv=[str(secret), str(os.getpid())], timeout_s=30, memory_mb=512, max_tasks=16
        )
    try:
        seen = json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        lines = res.stderr.strip().splitlines()
        return lines[-1][:300] if lines else f"the Landlock probe exited with status {res.returncode}"
    refused = all(seen[k] != "allowed" for k in ("read", "environ", "signal", "write", "fork", "inet"))
    if (
        not refused
        or seen["seccomp"] != "2"
        or seen["nnp"] != "1"
        or (grpo_host.root() and seen["uid"] == 0)
        or seen["threads"] >= 100
    ):
        return f"the Landlock sandbox does not hold: {json.dumps(seen)[:300]}"
    return plan


def _inside_boundary() -> str | None:
    """The outer boundary's description when this process already runs inside a sandbox."""
    outer = os.environ.get(_INSIDE_ENV)
    if not outer:
        return None
    if os.getuid() == SANDBOX_UID:
        return outer
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    confined = re.search(r"^NoNewPrivs:\s*1$", status, re.M) and re.search(r"^Seccomp:\s*2$", status, re.M)
    return outer if confined else None


def _plan_here() -> tuple[_Plan | None, str]:
    """The boundary runs get here (None: only the weak fallback), and why each stronger one is missing."""
    inside = _inside_boundary() is not None
    bw = _bwrap(shutil.which("bwrap"), os.environ.get(_NO_BWRAP_ENV, ""), inside)
    bw_bounds = isinstance(bw, _Plan) and "NOT bounded" not in bw.description
    if isinstance(bw, _Plan) and bw_bounds:
        return bw, ""
    ll = _landlock(os.environ.get(_NO_LANDLOCK_ENV, ""), inside)
    if isinstance(ll, _Plan):
        return ll, ""
    if isinstance(bw, _Plan):
        return bw, ""
    return None, f"bubblewrap: {bw}; Landlock: {ll}"


def bwrap_boundary() -> str | None:
    """What isolates children on this machine, bubblewrap's or Landlock's boundary, or None when neither holds.

    Probed once per `bwrap` on PATH and per value of GRPO_SANDBOX_NO_BWRAP / GRPO_SANDBOX_NO_LANDLOCK (set: skip that
    boundary): each probe runs the real sandbox and checks what it claims (uid, capabilities, namespaces, seccomp;
    for Landlock also that files, /proc, signals, sockets, fork and threads beyond the limit are refused).
    bubblewrap is preferred, unless it cannot bound the tasks here (the parent is root and no pids cgroup can be
    made) and Landlock can.
    """
    plan, _ = _plan_here()
    return plan.description if plan else None


boundary = bwrap_boundary


def no_boundary_reason() -> str:
    """Why no boundary can be made here ("" when one can): what each boundary lacks, and what to do."""
    plan, why = _plan_here()
    return (
        ""
        if plan
        else (
            f"no sandbox boundary can be made here ({why}); install bubblewrap and allow "
            f"unprivileged user namespaces, or run on Linux 6.12+ with Landlock enabled"
        )
    )


def fallback_isolation() -> str:
    """How children are isolated without a boundary: the `unshare` flags or the audit hook, plus seccomp."""
    prefix = isolation_prefix()
    base = "unshare " + " ".join(prefix[1:]) if prefix else "audit hook only"
    return base + (" + seccomp" if grpo_seccomp.supported() else "")


def current_isolation() -> str:
    """How `run_sandboxed` isolates children here (a boundary, or the weak fallback)."""
    outer = _inside_boundary()
    if outer:
        return f"inside the parent's sandbox: {outer}"
    return bwrap_boundary() or fallback_isolation()


@functools.cache
def _warn_fallback(isolation: str, why: str) -> None:
    print(
        f"grpo_sandbox: custom code runs without an isolation boundary: {why}; falling back to {isolation}, which "
        f"does not stop code that means harm.",
        file=sys.stderr,
        flush=True,
    )


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
    return {
        "PATH": path,
        "HOME": home,
        "TMPDIR": home,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        **(extra or {}),
    }


# ---------------------------------------------------------------- running


def run_sandboxed(
    code: str,
    *,
    stdin: str = "",
    timeout_s: float = 10.0,
    memory_mb: int | None = 512,
    files: dict[str, str] | None = None,
    argv: list[str] | None = None,
    allow_subprocess: bool = False,
    sys_path: list[str] | None = None,
    env: dict[str, str] | None = None,
    max_output: int = 1_000_000,
    read_only: list[str] | None = None,
    report: bool = False,
    max_tasks: int | None = None,
) -> SandboxResult:
    """Run Python `code` in a sandboxed subprocess and return its exit status and output.

    The boundary (see `boundary`): bubblewrap (uid 65534 without capabilities in its own user, pid, network, ipc,
    uts, cgroup and mount namespaces; it sees only the system, the Python installation and `read_only` (default: the
    `sys_path` entries), read-only, a fresh read-only /proc, a minimal read-only /dev and its work dir at
    /sandbox/work), else Landlock (the same paths readable, the work dir writable, nothing else; no TCP, no abstract
    Unix sockets or signals outside; a spare uid when the dashboard is root), else a weak fallback that prints a
    warning once. The work dir holds `files` and is also HOME and TMPDIR.

    In every mode: a minimal environment; limits on address space (`memory_mb`), CPU and wall-clock time
    (`timeout_s`: the whole sandbox is killed), file size, open files and tasks (`max_tasks` threads and processes;
    default 64, or 256 with `allow_subprocess`); a seccomp filter refusing exec and fork unless `allow_subprocess`,
    memfd and SysV shared memory, sockets but AF_UNIX (none at all without a network namespace), ptrace, mounts,
    namespaces, bpf, io_uring...; an audit hook (defence in depth). `report=True` gives the program a channel of its
    own, an fd named by GRPO_SANDBOX_REPORT_FD, returned as `SandboxResult.report`.
    """
    plan, why = _plan_here()
    outer = _inside_boundary()
    if plan is None and outer:
        plan = _Plan("nested", f"inside the parent's sandbox: {outer}")
    elif plan is None:
        prefix = isolation_prefix()
        plan = _Plan(
            "unshare" if prefix else "audit-hook",
            fallback_isolation(),
            cgroup=grpo_host.pids_cgroup_base() is not None,
        )
        _warn_fallback(plan.description, why)
    return _run(
        plan,
        code,
        stdin=stdin,
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        files=files,
        argv=argv,
        allow_subprocess=allow_subprocess,
        sys_path=sys_path,
        env=env,
        max_output=max_output,
        read_only=read_only,
        report=report,
        max_tasks=max_tasks,
    )


def _run(
    plan: _Plan,
    code: str,
    *,
    stdin: str = "",
    timeout_s: float,
    memory_mb: int | None,
    files: dict[str, str] | None = None,
    argv: list[str] | None = None,
    allow_subprocess: bool = False,
    sys_path: list[str] | None = None,
    env: dict[str, str] | None = None,
    max_output: int = 1_000_000,
    read_only: list[str] | None = None,
    report: bool = False,
    max_tasks: int | None = None,
) -> SandboxResult:
    tasks = max_tasks or (MAX_TASKS_WITH_SUBPROCESSES if allow_subprocess else MAX_TASKS)
    visible = list(sys_path or []) if read_only is None else list(read_only)
    with (
        tempfile.TemporaryDirectory(prefix="grpo-sandbox-") as work,
        tempfile.TemporaryDirectory(prefix="grpo-sandbox-io-") as io_dir,
    ):
        for name, content in (files or {}).items():
            target = Path(work) / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8")
        (Path(work) / "main.py").write_text(code, encoding="utf-8")
        inner = SANDBOX_WORK if plan.mode == "bubblewrap" else work
        (Path(io_dir) / "stdin").write_text(stdin, encoding="utf-8")
        path = list(sys_path or [])
        cfg: dict[str, Any] = {
            "memory": int(memory_mb) * 2**20 if memory_mb else 0,
            "cpu": int(math.ceil(timeout_s)) + 1,
            "fsize": max(4 * max_output, 64 * 2**20),
            "nofile": _NOFILE_WITH_SUBPROCESSES if allow_subprocess else _NOFILE,
            "deny": _deny_patterns(),
            "block": [] if allow_subprocess else list(_SPAWN_EVENTS),
            "main": f"{inner}/main.py",
            "argv": list(argv or []),
            "landlock": None,
            "uid": None,
            "nproc": None,
        }
        namespaced = (
            plan.mode == "bubblewrap"
            or (plan.mode == "nested" and plan.description.startswith("inside the parent's sandbox: bubblewrap"))
            or (plan.mode == "unshare" and "--pid" in isolation_prefix())
        )
        if plan.mode in ("landlock", "nested") and grpo_confine.landlock_abi() >= 1:
            cfg["landlock"] = {
                "abi": _LANDLOCK_ABI if plan.mode == "landlock" else 1,
                "rules": grpo_host.landlock_rules(work, visible),
            }
            path = grpo_host.shadow_path(work, path, visible)
        if plan.mode == "landlock" and grpo_host.root():
            cfg["uid"], cfg["keep_read_search"] = grpo_host.spare_uid(), grpo_host.has_read_search()
            cfg["nproc"] = tasks
            grpo_host.chown_tree(work, cfg["uid"])
        elif plan.mode != "nested" and not grpo_host.root():
            # Counted per user namespace under bubblewrap; host-wide for the dashboard's uid otherwise.
            cfg["nproc"] = tasks + (2 if plan.mode == "bubblewrap" else grpo_host.tasks_of(os.getuid()))
        cfg["path"] = path
        program = grpo_seccomp.inner_program(allow_subprocess, namespaced)
        cfg["seccomp"] = program.hex() if program else ""
        child_env = sandbox_env(inner, env)
        fds: list[int] = []
        prefix: tuple[str, ...] = ()
        cgroup = grpo_host.make_cgroup(tasks + 2) if plan.cgroup else None
        try:
            if plan.mode == "bubblewrap":
                outer_program = seccomp_program(allow_subprocess) if plan.outer_seccomp else None
                if outer_program:
                    fds.append(grpo_bwrap.seccomp_pipe(outer_program))
                prefix = tuple(
                    grpo_bwrap.command(plan.tool, work, visible, fds[0] if fds else None, plan.disable_userns)
                )
            elif plan.mode == "unshare":
                prefix = isolation_prefix()
            if plan.mode != "audit-hook" and plan.mode != "unshare":
                child_env[_INSIDE_ENV] = (
                    plan.description if plan.mode != "nested" else plan.description.split(": ", 1)[1]
                )
            if report:
                fds.append(os.open(Path(io_dir) / "report", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
                child_env[REPORT_FD_ENV] = str(fds[-1])
                if cfg["uid"] is not None:
                    os.fchown(fds[-1], cfg["uid"], cfg["uid"])
            cmd = [*prefix, sys.executable, "-I", "-c", _CONFINE, json.dumps(cfg)]
            if cgroup:
                cmd = [sys.executable, "-I", "-S", "-c", _ENTER_CGROUP, cgroup, *cmd]
            returncode, timed_out, duration = _spawn(cmd, io_dir, work, child_env, fds, timeout_s)
        finally:
            for fd in fds:
                os.close(fd)
            if cgroup:
                grpo_host.remove_cgroup(cgroup)
        out = (Path(io_dir) / "out").read_bytes()[:max_output].decode("utf-8", errors="replace")
        err = (Path(io_dir) / "err").read_bytes()[-max_output:].decode("utf-8", errors="replace")
        channel = Path(io_dir) / "report"
        text = channel.read_bytes()[:max_output].decode("utf-8", errors="replace") if channel.exists() else ""
    return SandboxResult(None if timed_out else returncode, out, err, timed_out, duration, plan.description, text)


def _spawn(
    cmd: list[str], io_dir: str, work: str, env: dict[str, str], fds: list[int], timeout_s: float
) -> tuple[int | None, bool, float]:
    start = time.monotonic()
    timed_out = False
    with (
        open(Path(io_dir) / "stdin", "rb") as fin,
        open(Path(io_dir) / "out", "wb") as fout,
        open(Path(io_dir) / "err", "wb") as ferr,
    ):
        proc = subprocess.Popen(
            cmd, stdin=fin, stdout=fout, stderr=ferr, cwd=work, start_new_session=True, env=env, pass_fds=tuple(fds)
        )
        try:
            returncode: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            grpo_host.kill(-proc.pid)
            returncode = proc.wait()
    return returncode, timed_out, time.monotonic() - start


# ---------------------------------------------------------------- code tests

_HARNESS = r"""
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
"""


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
    res = run_sandboxed(
        _HARNESS,
        stdin=nonce + "\n" + json.dumps(tests),
        files={"solution.py": code},
        timeout_s=timeout_s,
        memory_mb=memory_mb,
    )
    oks: set[int] = set()
    for line in res.stdout.splitlines():
        if line.startswith(nonce):
            record = json.loads(line[len(nonce) :])
            if record.get("ok"):
                oks.add(int(record["i"]))
    return len(oks) / len(tests)
