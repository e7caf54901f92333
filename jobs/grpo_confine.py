"""The first code a sandboxed child runs (`python -I -c <this file's text> <config json>`, see `grpo_sandbox.py`).

Before any untrusted code, in this order: resource limits; no new privileges; a Landlock domain (files, TCP,
abstract Unix sockets and signals limited to what the config allows); when the parent runs as root without a user
namespace, a switch to the config's unprivileged uid that keeps only CAP_DAC_READ_SEARCH (so files under a
0700 home stay readable, inside what Landlock allows); the task limit (RLIMIT_NPROC); the inner seccomp filter
(`grpo_seccomp.inner_program`); an audit hook (defence in depth only: code in the same interpreter can switch it
off). Then the program runs as `__main__`. Any step the config asks for that fails ends the child with status 121
and a message naming the step, so code never runs with less confinement than the parent reported.

Importable as a module (the parent uses `landlock_abi`); importing it confines nothing. Uses the standard library
only: it runs with `-I`, before the program's own paths exist.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import resource
import runpy
import struct
import sys
from typing import Any

_NR_LANDLOCK_CREATE_RULESET, _NR_LANDLOCK_ADD_RULE, _NR_LANDLOCK_RESTRICT_SELF = 444, 445, 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_REFER, _FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1
_PR_SET_KEEPCAPS, _PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _PR_CAPBSET_DROP, _PR_CAP_AMBIENT = 8, 38, 22, 24, 47
_PR_CAP_AMBIENT_CLEAR_ALL, _SECCOMP_MODE_FILTER = 4, 2
_CAP_DAC_READ_SEARCH = 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_EXIT_CONFINE_FAILED = 121


def _libc() -> ctypes.CDLL:
    lib = ctypes.CDLL(None, use_errno=True)
    lib.syscall.restype = ctypes.c_long
    lib.prctl.restype = ctypes.c_int
    return lib


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0 when Landlock is missing, disabled or not Linux x86_64/arm64)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        lib = _libc()
    except OSError:
        return 0
    abi = lib.syscall(
        ctypes.c_long(_NR_LANDLOCK_CREATE_RULESET),
        None,
        ctypes.c_size_t(0),
        ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION),
    )
    return max(int(abi), 0)


def fs_rights(abi: int) -> int:
    """Every filesystem access right the Landlock ABI `abi` can restrict."""
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= _FS_REFER
    if abi >= 3:
        rights |= _FS_TRUNCATE
    if abi >= 5:
        rights |= _FS_IOCTL_DEV
    return rights


def _fail(step: str, why: str) -> None:
    sys.stderr.write(f"sandbox: could not {step} ({why}); the code was not run.\n")
    sys.stderr.flush()
    os._exit(_EXIT_CONFINE_FAILED)


def _landlock(lib: ctypes.CDLL, rules: list[list[Any]], abi: int) -> None:
    """Restrict this thread (the only one yet) and its future children to `rules`: [path, "read"|"write"|
    "device"|"proc"] pairs. TCP bind/connect (ABI 4+), abstract Unix sockets and signals (ABI 6+) are scoped to
    the domain; paths missing here are skipped."""
    handled = fs_rights(abi)
    attr = struct.pack(
        "<QQQ",
        handled,
        _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0,
        _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if abi >= 6 else 0,
    )
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    buf = ctypes.create_string_buffer(attr[:size], size)
    ruleset = lib.syscall(ctypes.c_long(_NR_LANDLOCK_CREATE_RULESET), buf, ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        _fail("create a Landlock ruleset", os.strerror(ctypes.get_errno()))
    read_file = FS_READ_FILE | FS_EXECUTE
    kinds = {
        "read": read_file | FS_READ_DIR,
        "proc": FS_READ_FILE | FS_READ_DIR,
        "write": handled,
        "device": FS_READ_FILE | FS_WRITE_FILE | (_FS_TRUNCATE | _FS_IOCTL_DEV) & handled,
    }
    for path, kind in rules:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            access = kinds[kind]
            if not os.path.isdir(f"/proc/self/fd/{fd}"):
                access &= FS_READ_FILE | FS_WRITE_FILE | FS_EXECUTE | _FS_TRUNCATE | _FS_IOCTL_DEV
            rule = ctypes.create_string_buffer(struct.pack("<Qi", access, fd), 12)
            if (
                lib.syscall(
                    ctypes.c_long(_NR_LANDLOCK_ADD_RULE),
                    ctypes.c_int(ruleset),
                    ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH),
                    rule,
                    ctypes.c_uint32(0),
                )
                < 0
            ):
                _fail(f"add the Landlock rule for {path}", os.strerror(ctypes.get_errno()))
        finally:
            os.close(fd)
    if lib.syscall(ctypes.c_long(_NR_LANDLOCK_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
        _fail("enter the Landlock domain", os.strerror(ctypes.get_errno()))
    os.close(ruleset)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_root(lib: ctypes.CDLL, uid: int, keep_read_search: bool) -> None:
    """Become `uid` (no groups) with no capability but, if `keep_read_search`, CAP_DAC_READ_SEARCH: RLIMIT_NPROC
    does not bind kernel uid 0."""
    for cap in range(64):  # best effort (needs CAP_SETPCAP): no_new_privs already keeps exec from adding any
        if cap != _CAP_DAC_READ_SEARCH or not keep_read_search:
            lib.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    try:
        if lib.prctl(_PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0:
            raise OSError(ctypes.get_errno(), "PR_SET_KEEPCAPS")
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    except OSError as exc:
        _fail(f"switch to uid {uid}", str(exc))
    data = (_CapData * 2)()
    data[0].effective = data[0].permitted = 1 << _CAP_DAC_READ_SEARCH if keep_read_search else 0
    if lib.capset(ctypes.byref(_CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)), data) < 0:
        _fail("set the capabilities", os.strerror(ctypes.get_errno()))
    lib.prctl(_PR_SET_KEEPCAPS, 0, 0, 0, 0)
    lib.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _seccomp(lib: ctypes.CDLL, program: bytes) -> None:
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if lib.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.c_void_p(ctypes.addressof(prog)), 0, 0) < 0:
        _fail("install the seccomp filter", os.strerror(ctypes.get_errno()))


def _limit(res: int, soft: int, hard: int) -> None:
    cur_soft, cur_hard = resource.getrlimit(res)
    if cur_hard != resource.RLIM_INFINITY:
        soft, hard = min(soft, cur_hard), min(hard, cur_hard)
    try:
        resource.setrlimit(res, (soft, hard))
    except (ValueError, OSError) as exc:
        if res == resource.RLIMIT_NPROC:
            _fail("set the task limit", str(exc))


_DENY: list[re.Pattern[str]] = []
_BLOCK: frozenset[str] = frozenset()
_PROC = re.compile(r"^/proc/(\d+)(?:/|$)")
_ME, _realpath, _fsdecode = str(os.getpid()), os.path.realpath, os.fsdecode


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event == "open":
        if isinstance(args[0], (str, bytes)):
            p = _realpath(_fsdecode(args[0]))
            m = _PROC.match(p)
            if (m and m.group(1) != _ME) or any(d.match(p) for d in _DENY):
                raise PermissionError(f"sandbox: reading {p} is not allowed")
    elif event == "socket.__new__":
        if args[1] != 1:
            raise PermissionError("sandbox: network access is disabled")
    elif event in _BLOCK and not (event == "ctypes.dlopen" and args[0] is None):
        raise PermissionError(f"sandbox: {event} is not allowed")


def _audit_hook(cfg: dict[str, Any]) -> None:
    global _DENY, _BLOCK
    _DENY, _BLOCK = [re.compile(p) for p in cfg["deny"]], frozenset(cfg["block"])
    sys.addaudithook(_hook)


def confine(cfg: dict[str, Any]) -> None:
    """Apply every limit and boundary `cfg` asks for to this process (see the module docstring for the order)."""
    if cfg["memory"]:
        _limit(resource.RLIMIT_AS, cfg["memory"], cfg["memory"])
    _limit(resource.RLIMIT_CPU, cfg["cpu"], cfg["cpu"] + 2)
    _limit(resource.RLIMIT_FSIZE, cfg["fsize"], cfg["fsize"])
    _limit(resource.RLIMIT_CORE, 0, 0)
    _limit(resource.RLIMIT_NOFILE, cfg["nofile"], cfg["nofile"])
    lib = _libc() if cfg["landlock"] or cfg["uid"] is not None or cfg["seccomp"] else None
    if lib is not None and lib.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0:
        _fail("set no_new_privs", os.strerror(ctypes.get_errno()))
    if cfg["landlock"]:
        abi = landlock_abi()
        if abi < cfg["landlock"]["abi"]:
            _fail(f"use Landlock ABI {cfg['landlock']['abi']}", f"the kernel offers ABI {abi}")
        _landlock(lib, [*cfg["landlock"]["rules"], [f"/proc/{os.getpid()}", "proc"]], abi)
    if cfg["uid"] is not None:
        _drop_root(lib, int(cfg["uid"]), bool(cfg.get("keep_read_search")))
    if cfg["nproc"]:
        _limit(resource.RLIMIT_NPROC, cfg["nproc"], cfg["nproc"])
    if cfg["seccomp"]:
        _seccomp(lib, bytes.fromhex(cfg["seccomp"]))
    _audit_hook(cfg)


def main(argv: list[str]) -> None:
    """Confine this process as `argv[1]` (the JSON config) says, then run the program it names as `__main__`."""
    cfg = json.loads(argv[1])
    confine(cfg)
    sys.path[:0] = cfg["path"]
    sys.argv = [cfg["main"], *cfg["argv"]]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv)
