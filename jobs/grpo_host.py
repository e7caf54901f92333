"""Host-side helpers of the reward-code sandbox (`grpo_sandbox.py`): the pids cgroup and RLIMIT_NPROC values that
bound a sandbox's tasks, the spare uid a root parent gives a Landlock child, and the Landlock rules and import paths
of such a child.

Ships beside `grpo_job.py`; imports nothing from `grpo_dashboard`.
"""

from __future__ import annotations

import functools
import os
import re
import secrets
import signal
import time
from pathlib import Path

import grpo_bwrap

_SPARE_UIDS = (2_000_000_000, 100_000_000)  # where a root parent picks a per-run uid for a Landlock child


def kill(pid: int) -> None:
    """SIGKILL a process (pid > 0) or a process group (pid < 0), gone or not."""
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@functools.cache
def pids_cgroup_base() -> str | None:
    """A cgroup directory (v1 pids hierarchy, or v2 with pids delegated) this process may make children in."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    candidates = []
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        if "pids" in controllers.split(","):
            candidates.append(f"/sys/fs/cgroup/pids{rel}".rstrip("/"))
        elif controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").is_file():
            base = f"/sys/fs/cgroup{rel}".rstrip("/")
            try:
                if "pids" in Path(base, "cgroup.subtree_control").read_text().split():
                    candidates.append(base)
            except OSError:
                pass
    for base in candidates:
        probe = Path(base, f"grpo-sandbox-probe-{secrets.token_hex(4)}")
        try:
            probe.mkdir()
        except OSError:
            continue
        try:
            if (probe / "pids.max").is_file():
                return base
        finally:
            probe.rmdir()
    return None


def make_cgroup(max_tasks: int) -> str | None:
    """A new pids cgroup allowing `max_tasks` tasks (its path), or None where none can be made."""
    base = pids_cgroup_base()
    if base is None:
        return None
    path = Path(base, f"grpo-sandbox-{secrets.token_hex(8)}")
    try:
        path.mkdir()
        (path / "pids.max").write_text(str(max_tasks))
    except OSError:
        remove_cgroup(str(path))
        return None
    return str(path)


def remove_cgroup(path: str) -> None:
    """Kill whatever is left in the cgroup and remove it (waits up to 2 s for the processes to go)."""
    deadline = time.monotonic() + 2.0
    while True:
        try:
            for pid in Path(path, "cgroup.procs").read_text().split():
                kill(int(pid))
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)


def tasks_of(uid: int) -> int:
    """How many tasks (threads) the host counts for `uid`, the count RLIMIT_NPROC is checked against."""
    n = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                status = Path(entry.path, "status").read_text()
            except OSError:
                continue
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            if int(fields.get("Uid", "-1 0").split()[0]) == uid:
                n += int(fields.get("Threads", "1"))
    return n


def spare_uid() -> int:
    """An unused-looking uid for a root parent's Landlock child, inside this user namespace's uid map."""
    low, span = _SPARE_UIDS
    try:
        for line in Path("/proc/self/uid_map").read_text().splitlines():
            inside, _, count = (int(x) for x in line.split())
            if inside <= low and inside + count >= low + span:
                return low + secrets.randbelow(span)
            if count > 2000 and inside + count > 1000:
                top = inside + count - 1
                return top - 1 - secrets.randbelow(min(count // 2, span))
    except (OSError, ValueError):
        pass
    return low + secrets.randbelow(span)


def root() -> bool:
    """True when this process runs as root, whose kernel uid 0 RLIMIT_NPROC never binds."""
    return os.geteuid() == 0


def has_read_search() -> bool:
    """True when this process holds CAP_DAC_READ_SEARCH (a root parent's Landlock child may keep it)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return False
    m = re.search(r"^CapEff:\s*([0-9a-f]+)", status, re.MULTILINE)
    return bool(m and int(m.group(1), 16) & (1 << 2))


def landlock_rules(work: str, read_only: list[str]) -> list[list[str]]:
    """What a Landlock child may use: the system, Python and `read_only` (read), a few devices, `work` (write)."""
    rules = [
        [str(Path("/", d).resolve()), "read"]
        for d in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
        if Path("/", d).is_dir()
    ]
    rules += [[os.path.realpath(p), "read"] for p in [*grpo_bwrap.python_paths(), *read_only]]
    rules += [[f"/dev/{d}", "device"] for d in ("null", "zero", "full", "random", "urandom")]
    return [*rules, [os.path.realpath(work), "write"]]


def shadow_path(work: str, sys_path: list[str], visible: list[str]) -> list[str]:
    """`sys_path` with each entry Landlock does not let the child list replaced by a directory of symlinks to the
    visible paths in it (what bubblewrap's binds give: the entry holding only what the child may see)."""
    out = []
    reals = [os.path.realpath(v) for v in visible]
    for n, entry in enumerate(sys_path):
        real = os.path.realpath(entry)
        if any(real == r or real.startswith(r + "/") for r in reals if os.path.isdir(r)):
            out.append(entry)
            continue
        shadow = Path(work, ".sandbox-path", str(n))
        shadow.mkdir(parents=True, exist_ok=True)
        for r in reals:
            if os.path.dirname(r) == real and not (shadow / os.path.basename(r)).exists():
                (shadow / os.path.basename(r)).symlink_to(r)
        out.append(str(shadow))
    return out


def chown_tree(top: str, uid: int) -> None:
    """Give `top` and everything in it to `uid` (the work dir of a child that runs as a spare uid)."""
    for dirpath, dirnames, filenames in os.walk(top):
        os.chown(dirpath, uid, uid)
        for name in [*dirnames, *filenames]:
            os.chown(os.path.join(dirpath, name), uid, uid, follow_symlinks=False)
