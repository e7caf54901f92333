"""A sandbox for running untrusted Python (completions' code, users' reward code): a subprocess with time and memory
limits, a minimal environment without secrets and a temporary working directory. The boundary is bubblewrap where it
works (own user, pid, network, mount... namespaces, uid 65534 without capabilities, a read-only view of only the
system and Python, a seccomp filter); elsewhere a weak fallback (`unshare` namespaces where available) that prints
a warning. An audit hook runs in both as defence in depth. Also the unit-test harness of the code reward.

Ships beside `grpo_job.py` and `grpo_rewards.py`; imports nothing from `grpo_dashboard`.
"""

from __future__ import annotations

import functools
import json
import math
import os
import platform
import re
import secrets
import shutil
import signal
import struct
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
# Audit hooks are defence in depth, not a jail: code in the same interpreter can switch them off. The barrier is
# bubblewrap (namespaces, seccomp) when available, else the namespaces added by `unshare`.
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

# Inside bubblewrap: the work dir's fixed path, the unprivileged uid, and the variable that tells a nested sandbox
# (the code reward run by the reward worker) that it already runs inside one.
SANDBOX_WORK = "/sandbox/work"
SANDBOX_UID = 65534
_INSIDE_ENV = "GRPO_SANDBOX_INSIDE"
_NO_BWRAP_ENV = "GRPO_SANDBOX_NO_BWRAP"
_NO_UNSHARE_ENV = "GRPO_SANDBOX_NO_UNSHARE"


@functools.cache
def isolation_prefix() -> tuple[str, ...]:
    """The `unshare` command that gives the child its own network (and pid) namespace here, or () if none works.

    This is the fallback used when bubblewrap cannot create a sandbox (see `bwrap_boundary`).
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


# ---------------------------------------------------------------- seccomp (classic BPF, x86_64)

_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_SYSCALL_BIT = 0x40000000
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_LD_ABS_W, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16  # struct seccomp_data; arg0's low 32 bits on little-endian
_EPERM, _ENOSYS, _EAFNOSUPPORT = 1, 38, 97
_CLONE_THREAD = 0x00010000
_CLONE_NEW_NAMESPACES = 0x7E020000  # NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
_AF_UNIX = 1
_NR = {"clone": 56, "fork": 57, "vfork": 58, "socket": 41, "clone3": 435}
_DENIED = {  # always refused with EPERM: debugging other processes, mounts, namespaces, kernel keys and modules...
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "pidfd_getfd": 438,
    "process_madvise": 440, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272,
    "setns": 308, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442, "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298,
    "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "kexec_load": 246,
    "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176, "open_by_handle_at": 304,
}


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def seccomp_program(allow_subprocess: bool = False) -> bytes | None:
    """The seccomp filter (an array of classic-BPF `sock_filter`s) bubblewrap installs, or None off x86_64.

    Refused: other architectures and x32 numbers; clone with namespace flags; fork, vfork and clone without
    CLONE_THREAD (unless `allow_subprocess`); clone3 as ENOSYS (so glibc creates threads with clone); sockets other
    than AF_UNIX (EAFNOSUPPORT); and the syscalls in `_DENIED` (EPERM). Everything else is allowed.
    """
    if platform.machine().lower() not in ("x86_64", "amd64") or struct.calcsize("P") != 8:
        return None
    errno_ret = lambda e: _insn(_RET_K, _RET_ERRNO | e)  # noqa: E731
    prog = [_insn(_LD_ABS_W, _OFF_ARCH), _insn(_JEQ_K, _AUDIT_ARCH_X86_64, jt=1), errno_ret(_EPERM),
            _insn(_LD_ABS_W, _OFF_NR), _insn(_JGE_K, _X32_SYSCALL_BIT, jf=1), errno_ret(_EPERM)]
    clone = [_insn(_LD_ABS_W, _OFF_ARG0), _insn(_JSET_K, _CLONE_NEW_NAMESPACES, jf=1), errno_ret(_EPERM)]
    if not allow_subprocess:
        clone += [_insn(_JSET_K, _CLONE_THREAD, jt=1), errno_ret(_EPERM)]
    clone.append(_insn(_RET_K, _RET_ALLOW))
    socket = [_insn(_LD_ABS_W, _OFF_ARG0), _insn(_JEQ_K, _AF_UNIX, jt=1), errno_ret(_EAFNOSUPPORT),
              _insn(_RET_K, _RET_ALLOW)]
    for nr, block in ((_NR["clone"], clone), (_NR["socket"], socket)):
        prog += [_insn(_JEQ_K, nr, jf=len(block)), *block]
    simple = {nr: _EPERM for nr in _DENIED.values()}
    simple[_NR["clone3"]] = _ENOSYS
    if not allow_subprocess:
        simple[_NR["fork"]] = simple[_NR["vfork"]] = _EPERM
    for nr, err in sorted(simple.items()):
        prog += [_insn(_JEQ_K, nr, jf=1), errno_ret(err)]
    prog.append(_insn(_RET_K, _RET_ALLOW))
    return b"".join(prog)


# ---------------------------------------------------------------- bubblewrap

# Checked once per configuration inside a real sandbox: who we are, capabilities, seccomp mode, namespaces, threads,
# and that fork is refused.
_PROBE = r'''
import json, os, threading
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
t = threading.Thread(target=lambda: None)
t.start()
t.join()
try:
    pid = os.fork()
except OSError:
    fork = "refused"
else:
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    fork = "allowed"
ns = {n: os.readlink(f"/proc/self/ns/{n}") for n in ("user", "pid", "net", "ipc", "uts", "mnt", "cgroup")
      if os.path.exists(f"/proc/self/ns/{n}")}
print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "cap_eff": int(status["CapEff"], 16),
                  "seccomp": status.get("Seccomp", "").strip(), "fork": fork, "ns": ns}))
'''
_NAMESPACES = ("user", "pid", "net", "ipc", "uts", "mnt", "cgroup")


@dataclass(frozen=True)
class _Bwrap:
    tool: str
    seccomp: bool
    disable_userns: bool
    description: str


def _system_binds() -> list[str]:
    """Read-only binds of the system and the Python installation; the merged-/usr symlinks as symlinks."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = "/" + name
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for prefix in dict.fromkeys([sys.base_prefix, sys.prefix, sys.executable]):
        args += _ro_bind(prefix)
    return args


def _ro_bind(path: str) -> list[str]:
    real = os.path.realpath(path)
    if not os.path.exists(real) or any(real == d or real.startswith(d + "/") for d in ("/usr", "/proc", "/dev")):
        return []
    return ["--ro-bind", real, os.path.abspath(path)]


def _bwrap_command(tool: str, work: str, read_only: list[str], seccomp_fd: int | None,
                   disable_userns: bool) -> list[str]:
    args = [tool, "--unshare-all", "--unshare-user", *(["--disable-userns"] if disable_userns else []),
            "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "sandbox", "--die-with-parent",
            "--new-session", "--cap-drop", "ALL", *_system_binds()]
    for path in dict.fromkeys(read_only):
        args += _ro_bind(path)
    # /proc and /dev are made read-only: when the dashboard runs as root, the sandbox's uid maps to kernel uid 0,
    # which may write sysctls under /proc/sys; a writable /dev would be an unlimited tmpfs.
    args += ["--proc", "/proc", "--remount-ro", "/proc", "--dev", "/dev", "--remount-ro", "/dev",
             "--bind", work, SANDBOX_WORK, "--chdir", SANDBOX_WORK, "--remount-ro", "/"]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    return [*args, "--"]


def _seccomp_pipe(program: bytes) -> int:
    """A pipe's read end holding `program` (small enough for the pipe buffer), for `--seccomp FD`."""
    r, w = os.pipe()
    try:
        os.write(w, program)
    finally:
        os.close(w)
    return r


def _probe(tool: str, seccomp: bool, disable_userns: bool) -> tuple[str | None, str]:
    """(the boundary's description, "") when this bwrap configuration works and holds here, else (None, why not)."""
    program = seccomp_program() if seccomp else None
    if seccomp and program is None:
        return None, f"no seccomp filter for {platform.machine()}"
    with tempfile.TemporaryDirectory(prefix="grpo-sandbox-probe-") as work:
        fd = _seccomp_pipe(program) if program else None
        try:
            cmd = [*_bwrap_command(tool, work, [], fd, disable_userns), sys.executable, "-I", "-c", _PROBE]
            out = subprocess.run(cmd, capture_output=True, timeout=30, cwd=work, env=sandbox_env(SANDBOX_WORK),
                                 pass_fds=(fd,) if fd is not None else (), start_new_session=True)
        except (OSError, subprocess.SubprocessError) as exc:
            return None, f"{type(exc).__name__}: {exc}"
        finally:
            if fd is not None:
                os.close(fd)
    try:
        seen = json.loads(out.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        lines = out.stderr.decode(errors="replace").strip().splitlines()
        return None, lines[-1][:300] if lines else f"bwrap exited with status {out.returncode}"
    mine = {n: os.readlink(f"/proc/self/ns/{n}") for n in _NAMESPACES if os.path.exists(f"/proc/self/ns/{n}")}
    own = [n for n in _NAMESPACES if n in seen["ns"] and seen["ns"][n] != mine.get(n)]
    if out.returncode != 0 or seen["uid"] != SANDBOX_UID or seen["gid"] != SANDBOX_UID or seen["cap_eff"] != 0 \
            or not {"user", "pid", "net", "mnt"} <= set(own) or (seccomp and (seen["seccomp"] != "2"
                                                                             or seen["fork"] != "refused")):
        return None, f"the sandbox does not hold: {json.dumps(seen)[:300]}"
    names = "/".join("mount" if n == "mnt" else n for n in own)
    suffix = ", seccomp)" if seccomp else ")"
    return f"bubblewrap ({names} namespaces, uid {SANDBOX_UID}, no capabilities{suffix}", ""


@functools.cache
def _bwrap(tool: str | None, disabled: str, inside: bool) -> _Bwrap | str:
    """The working bubblewrap configuration, or why there is none."""
    if disabled:
        return f"{_NO_BWRAP_ENV} is set"
    if inside or not sys.platform.startswith("linux"):
        return "not on Linux" if not inside else "already inside a sandbox"
    if not tool:
        return "bwrap is not installed"
    why = ""
    for seccomp, disable_userns in ((True, True), (True, False), (False, True), (False, False)):
        description, reason = _probe(tool, seccomp, disable_userns)
        if description:
            return _Bwrap(tool, seccomp, disable_userns, description)
        why = why or reason
    return why


def _inside_boundary() -> str | None:
    """The outer boundary's description when this process already runs inside a bubblewrap sandbox."""
    outer = os.environ.get(_INSIDE_ENV)
    return outer if outer and os.getuid() == SANDBOX_UID else None


def _bwrap_found() -> _Bwrap | str:
    return _bwrap(shutil.which("bwrap"), os.environ.get(_NO_BWRAP_ENV, ""), _inside_boundary() is not None)


def _bwrap_here() -> _Bwrap | None:
    found = _bwrap_found()
    return found if isinstance(found, _Bwrap) else None


def bwrap_boundary() -> str | None:
    """What bubblewrap isolates children with on this machine, or None when it cannot create a sandbox here.

    Probed once per `bwrap` found on PATH and value of GRPO_SANDBOX_NO_BWRAP (set: force the fallback): the probe
    runs the real sandbox and checks the uid (65534), that no capabilities are left, the namespaces and the seccomp
    filter.
    """
    found = _bwrap_here()
    return found.description if found else None


def fallback_isolation() -> str:
    """How children are isolated without bubblewrap: the `unshare` flags, or the audit hook alone."""
    prefix = isolation_prefix()
    return "unshare " + " ".join(prefix[1:]) if prefix else "audit hook only"


def current_isolation() -> str:
    """How `run_sandboxed` isolates children here (the bubblewrap boundary, or the weak fallback)."""
    outer = _inside_boundary()
    if outer:
        return f"inside the parent's sandbox: {outer}"
    return bwrap_boundary() or fallback_isolation()


@functools.cache
def _warn_fallback(isolation: str, why: str) -> None:
    print(f"grpo_sandbox: custom code runs without an isolation boundary: bubblewrap cannot create a sandbox here "
          f"({why}); falling back to {isolation}, which does not stop code that means harm. Install bubblewrap and "
          f"allow unprivileged user namespaces.", file=sys.stderr, flush=True)


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
                  max_output: int = 1_000_000, read_only: list[str] | None = None) -> SandboxResult:
    """Run Python `code` in a sandboxed subprocess and return its exit status and output.

    With bubblewrap (see `bwrap_boundary`), the child runs as uid 65534 without capabilities in its own user, pid,
    network, ipc, uts, cgroup and mount namespaces, under a seccomp filter (no other processes unless
    `allow_subprocess`, no sockets but AF_UNIX, no mounts, ptrace, namespaces, bpf, io_uring...). It sees only the
    system (/usr), the Python installation and `read_only` (default: the `sys_path` entries), all read-only, a fresh
    /proc, a minimal /dev, and its temporary working directory at /sandbox/work (holding `files`; also HOME and
    TMPDIR), the only writable place. Without bubblewrap it falls back to `unshare` namespaces where available and
    prints a warning once.

    In both cases: a minimal environment, an address-space limit of `memory_mb`, a wall-clock limit of `timeout_s`
    (the whole sandbox is killed), and an audit hook (defence in depth) refusing sockets, subprocesses unless
    `allow_subprocess`, and reads of other processes' /proc entries or of token files (~/.cache/huggingface...).
    """
    boundary = _bwrap_here()
    outer = _inside_boundary()
    prefix: tuple[str, ...] = () if boundary else isolation_prefix()
    if boundary:
        isolation = boundary.description
    elif outer:
        isolation = f"inside the parent's sandbox: {outer}"
    else:
        isolation = "unshare " + " ".join(prefix[1:]) if prefix else "audit hook only"
        found = _bwrap_found()
        _warn_fallback(isolation, found if isinstance(found, str) else "")
    with tempfile.TemporaryDirectory(prefix="grpo-sandbox-") as work, \
            tempfile.TemporaryDirectory(prefix="grpo-sandbox-io-") as io_dir:
        for name, content in (files or {}).items():
            target = Path(work) / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8")
        (Path(work) / "main.py").write_text(code, encoding="utf-8")
        inner = SANDBOX_WORK if boundary else work
        (Path(io_dir) / "stdin").write_text(stdin, encoding="utf-8")
        cfg = {"memory": int(memory_mb) * 2**20 if memory_mb else 0, "cpu": int(math.ceil(timeout_s)) + 1,
               "fsize": max(4 * max_output, 64 * 2**20), "deny": _deny_patterns(), "path": list(sys_path or []),
               "block": [] if allow_subprocess else list(_SPAWN_EVENTS), "main": f"{inner}/main.py",
               "argv": list(argv or [])}
        child_env = sandbox_env(inner, env)
        seccomp_fd: int | None = None
        if boundary:
            program = seccomp_program(allow_subprocess) if boundary.seccomp else None
            seccomp_fd = _seccomp_pipe(program) if program else None
            mounts = list(sys_path or []) if read_only is None else read_only
            prefix = tuple(_bwrap_command(boundary.tool, work, mounts, seccomp_fd, boundary.disable_userns))
            child_env[_INSIDE_ENV] = boundary.description
        elif outer:
            child_env[_INSIDE_ENV] = outer
        cmd = [*prefix, sys.executable, "-I", "-c", _GUARD, json.dumps(cfg)]
        start = time.monotonic()
        timed_out = False
        try:
            with open(Path(io_dir) / "stdin", "rb") as fin, open(Path(io_dir) / "out", "wb") as fout, \
                    open(Path(io_dir) / "err", "wb") as ferr:
                proc = subprocess.Popen(cmd, stdin=fin, stdout=fout, stderr=ferr, cwd=work, start_new_session=True,
                                        env=child_env, pass_fds=() if seccomp_fd is None else (seccomp_fd,))
                try:
                    returncode: int | None = proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    timed_out = True
                finally:
                    _kill_group(proc.pid)
                    returncode = proc.wait()
        finally:
            if seccomp_fd is not None:
                os.close(seccomp_fd)
        duration = time.monotonic() - start
        out = (Path(io_dir) / "out").read_bytes()[:max_output].decode("utf-8", errors="replace")
        err = (Path(io_dir) / "err").read_bytes()[-max_output:].decode("utf-8", errors="replace")
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
