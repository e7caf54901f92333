"""Seccomp filters (classic BPF, x86_64) for the reward-code sandbox in `grpo_sandbox.py`.

Two filters stack in a sandboxed child. The *outer* one is installed by bubblewrap before it starts Python, so it must
allow `execve`. The *inner* one is installed by the child's guard (`grpo_confine.py`) once Python runs, before any
untrusted code, in every mode (bubblewrap, Landlock, the weak fallbacks): it also refuses `execve`/`execveat` unless
subprocesses are allowed, and, without a network namespace, every `socket()`. Each filter is a bytes array of
`struct sock_filter`; seccomp keeps the most restrictive answer of all filters.

Ships beside `grpo_job.py`; imports nothing from `grpo_dashboard`.
"""

from __future__ import annotations

import platform
import struct

_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_SYSCALL_BIT = 0x40000000
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_LD_ABS_W, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16  # struct seccomp_data; arg0's low 32 bits on little-endian
EPERM, ENOSYS, EAFNOSUPPORT = 1, 38, 97
_CLONE_THREAD = 0x00010000
_CLONE_NEW_NAMESPACES = 0x7E020000  # NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
_AF_UNIX = 1
NR = {
    "clone": 56,
    "fork": 57,
    "vfork": 58,
    "execve": 59,
    "execveat": 322,
    "socket": 41,
    "socketpair": 53,
    "clone3": 435,
    "unshare": 272,
    "memfd_create": 319,
    "setsid": 112,
    "setpgid": 109,
}
DENIED = {  # always refused with EPERM: debugging other processes, mounts, namespaces, kernel keys and modules...
    "ptrace": 101,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "kcmp": 312,
    "pidfd_getfd": 438,
    "process_madvise": 440,
    "mount": 165,
    "umount2": 166,
    "pivot_root": 155,
    "chroot": 161,
    "unshare": 272,
    "setns": 308,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "mount_setattr": 442,
    "keyctl": 250,
    "add_key": 248,
    "request_key": 249,
    "bpf": 321,
    "perf_event_open": 298,
    "userfaultfd": 323,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "kexec_load": 246,
    "kexec_file_load": 320,
    "init_module": 175,
    "finit_module": 313,
    "delete_module": 176,
    "open_by_handle_at": 304,
    # Memory the address-space limit does not count: memfd files, SysV shared memory (which outlives the process
    # without an IPC namespace), SysV semaphores and message queues, POSIX message queues.
    "memfd_create": 319,
    "memfd_secret": 447,
    "shmget": 29,
    "shmat": 30,
    "shmctl": 31,
    "semget": 64,
    "semop": 65,
    "semctl": 66,
    "semtimedop": 220,
    "msgget": 68,
    "msgsnd": 69,
    "msgrcv": 70,
    "msgctl": 71,
    "mq_open": 240,
}


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def _errno(e: int) -> bytes:
    return _insn(_RET_K, _RET_ERRNO | e)


def supported() -> bool:
    """True on x86_64 (64-bit), the only architecture these filters are written for."""
    return platform.machine().lower() in ("x86_64", "amd64") and struct.calcsize("P") == 8


def build(*, allow_fork: bool, allow_exec: bool, sockets: str, pin_session: bool = False) -> bytes | None:
    """A seccomp filter program, or None off x86_64.

    Refused always: other architectures and x32 numbers; clone with namespace flags; clone3 as ENOSYS (so glibc
    creates threads with clone, whose flags the filter can read); the syscalls in `DENIED` (EPERM). Refused unless
    `allow_fork`: fork, vfork and clone without CLONE_THREAD. Refused unless `allow_exec`: execve, execveat.
    `sockets`: "unix" refuses socket() of every family but AF_UNIX, "none" refuses socket() altogether (a Unix
    socket could reach the host's pathname sockets without a mount namespace); socketpair() (AF_UNIX only) works in
    both, for asyncio's self-pipe. `pin_session` (without a pid namespace): setsid and setpgid succeed without
    doing anything, so every descendant stays in the sandbox's process group, which is killed at the end.
    """
    if not supported():
        return None
    if sockets not in ("unix", "none"):
        raise ValueError(f"sockets must be 'unix' or 'none', not {sockets!r}")
    prog = [
        _insn(_LD_ABS_W, _OFF_ARCH),
        _insn(_JEQ_K, _AUDIT_ARCH_X86_64, jt=1),
        _errno(EPERM),
        _insn(_LD_ABS_W, _OFF_NR),
        _insn(_JGE_K, _X32_SYSCALL_BIT, jf=1),
        _errno(EPERM),
    ]
    clone = [_insn(_LD_ABS_W, _OFF_ARG0), _insn(_JSET_K, _CLONE_NEW_NAMESPACES, jf=1), _errno(EPERM)]
    if not allow_fork:
        clone += [_insn(_JSET_K, _CLONE_THREAD, jt=1), _errno(EPERM)]
    clone.append(_insn(_RET_K, _RET_ALLOW))
    unix_only = [
        _insn(_LD_ABS_W, _OFF_ARG0),
        _insn(_JEQ_K, _AF_UNIX, jt=1),
        _errno(EAFNOSUPPORT),
        _insn(_RET_K, _RET_ALLOW),
    ]
    blocks = [(NR["clone"], clone), (NR["socketpair"], unix_only)]
    blocks.append((NR["socket"], unix_only if sockets == "unix" else [_errno(EAFNOSUPPORT)]))
    for nr, block in blocks:
        prog += [_insn(_LD_ABS_W, _OFF_NR), _insn(_JEQ_K, nr, jf=len(block)), *block]
    simple = {nr: EPERM for nr in DENIED.values()}
    simple[NR["clone3"]] = ENOSYS
    if not allow_fork:
        simple[NR["fork"]] = simple[NR["vfork"]] = EPERM
    if not allow_exec:
        simple[NR["execve"]] = simple[NR["execveat"]] = EPERM
    if pin_session:
        simple[NR["setsid"]] = simple[NR["setpgid"]] = 0
    prog.append(_insn(_LD_ABS_W, _OFF_NR))
    for nr, err in sorted(simple.items()):
        prog += [_insn(_JEQ_K, nr, jf=1), _errno(err)]
    prog.append(_insn(_RET_K, _RET_ALLOW))
    return b"".join(prog)


def outer_program(allow_subprocess: bool) -> bytes | None:
    """The filter bubblewrap installs (`--seccomp FD`): exec allowed (bubblewrap execs Python under it)."""
    return build(allow_fork=allow_subprocess, allow_exec=True, sockets="unix")


def inner_program(allow_subprocess: bool, namespaced: bool) -> bytes | None:
    """The filter the child's guard installs before untrusted code: exec refused unless `allow_subprocess`;
    sockets limited to AF_UNIX inside network and pid namespaces (`namespaced`), refused outside them, where the
    process group is also pinned."""
    return build(
        allow_fork=allow_subprocess,
        allow_exec=allow_subprocess,
        sockets="unix" if namespaced else "none",
        pin_session=not namespaced,
    )
