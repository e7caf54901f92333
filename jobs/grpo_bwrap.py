"""The bubblewrap command line of the reward-code sandbox (`grpo_sandbox.py`), and its one-off probe.

The sandbox sees the system (/usr and the merged-/usr symlinks), the Python installation and the paths it is given,
all read-only and reachable exactly as on the host: a path that is a symlink on the host (a venv's `bin/python`
pointing into the base installation, a symlinked prefix) is a symlink inside too, and what it points to is bound,
so a standard `python -m venv` works like any other Python.

Ships beside `grpo_job.py`; imports nothing from `grpo_dashboard`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

SANDBOX_WORK = "/sandbox/work"
SANDBOX_UID = 65534
_SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_NAMESPACES = ("user", "pid", "net", "ipc", "uts", "mnt", "cgroup")


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


class Binds:
    """Read-only binds and symlinks that make host paths resolve inside the sandbox as they do outside."""

    def __init__(self) -> None:
        self.mounted: list[str] = ["/usr", "/proc", "/dev", SANDBOX_WORK]
        self.args: list[str] = ["--ro-bind", "/usr", "/usr"]
        self._links: list[str] = []

    def expose(self, path: str, depth: int = 0) -> None:
        """Make `path` (and every symlink on the way to it) visible read-only at its own path."""
        path = os.path.abspath(path)
        if depth > 20 or not os.path.lexists(path):
            return
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            q = "/" + "/".join(parts[:i])
            if os.path.islink(q):
                if not _under(q, self.mounted):
                    self._links += ["--symlink", os.readlink(q), q]
                    self.mounted.append(q)
                rest = os.path.join(os.path.dirname(q), os.readlink(q), *parts[i:])
                self.expose(os.path.normpath(rest), depth + 1)
                return
        if not _under(path, self.mounted):
            self.mounted.append(path)
            self.args += ["--ro-bind", path, path]

    def finish(self) -> list[str]:
        """The bwrap arguments: binds first, then the symlinks that are not inside a bound tree."""
        return [*self.args, *self._links]


def python_paths() -> list[str]:
    """The Python installation: prefixes (a venv's and its base's) and the interpreter with its symlink chain."""
    return list(dict.fromkeys([sys.base_prefix, sys.prefix, sys.base_exec_prefix, sys.exec_prefix, sys.executable]))


def system_binds(read_only: list[str]) -> list[str]:
    """Read-only binds of the system, the Python installation and `read_only`."""
    binds = Binds()
    for name in _SYSTEM_DIRS:
        binds.expose("/" + name)
    for path in [*python_paths(), *read_only]:
        binds.expose(path)
    return binds.finish()


def command(tool: str, work: str, read_only: list[str], seccomp_fd: int | None, disable_userns: bool) -> list[str]:
    """The bwrap command line (up to and including `--`) for a sandbox whose work dir is `work`."""
    args = [
        tool,
        "--unshare-all",
        "--unshare-user",
        *(["--disable-userns"] if disable_userns else []),
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_UID),
        "--hostname",
        "sandbox",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        *system_binds(read_only),
    ]
    # /proc and /dev are made read-only: when the dashboard runs as root, the sandbox's uid maps to kernel uid 0,
    # which may write sysctls under /proc/sys; a writable /dev (and its /dev/shm) would be an uncounted tmpfs.
    args += [
        "--proc",
        "/proc",
        "--remount-ro",
        "/proc",
        "--dev",
        "/dev",
        "--remount-ro",
        "/dev",
        "--bind",
        work,
        SANDBOX_WORK,
        "--chdir",
        SANDBOX_WORK,
        "--remount-ro",
        "/",
    ]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    return [*args, "--"]


def seccomp_pipe(program: bytes) -> int:
    """A pipe's read end holding `program` (small enough for the pipe buffer), for `--seccomp FD`."""
    r, w = os.pipe()
    try:
        os.write(w, program)
    finally:
        os.close(w)
    return r


# Checked once per configuration inside a real sandbox: who we are, capabilities, seccomp mode, namespaces, threads,
# and that fork is refused.
_PROBE = r"""
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
"""


def probe(tool: str, program: bytes | None, disable_userns: bool, env: dict[str, str]) -> tuple[str | None, str]:
    """(the boundary's description, "") when this bwrap configuration works and holds here, else (None, why not).

    `program`: the outer seccomp filter to install (None: none).
    """
    with tempfile.TemporaryDirectory(prefix="grpo-sandbox-probe-") as work:
        fd = seccomp_pipe(program) if program else None
        try:
            cmd = [*command(tool, work, [], fd, disable_userns), sys.executable, "-I", "-c", _PROBE]
            out = subprocess.run(
                cmd,
                capture_output=True,
                timeout=30,
                cwd=work,
                env=env,
                pass_fds=(fd,) if fd is not None else (),
                start_new_session=True,
            )
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
    seccomp = program is not None
    if (
        out.returncode != 0
        or seen["uid"] != SANDBOX_UID
        or seen["gid"] != SANDBOX_UID
        or seen["cap_eff"] != 0
        or not {"user", "pid", "net", "mnt"} <= set(own)
        or (seccomp and (seen["seccomp"] != "2" or seen["fork"] != "refused"))
    ):
        return None, f"the sandbox does not hold: {json.dumps(seen)[:300]}"
    names = "/".join("mount" if n == "mnt" else n for n in own)
    return f"bubblewrap ({names} namespaces, uid {SANDBOX_UID}, no capabilities{', seccomp' if seccomp else ''}", ""
