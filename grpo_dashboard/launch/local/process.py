"""Local processes by identity: a pid plus the process's start time, so a reused pid is never taken for a job.

The start time is psutil's creation time measured from boot, in clock ticks: exact, unaffected by changes to the
system clock (psutil identifies processes the same way), and the very value the store has always kept (the kernel's
`starttime` of /proc/<pid>/stat). A job is its process group's leader; the group is found and signalled as a whole.
"""

from __future__ import annotations

import os

import psutil

_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
_GONE = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
_EPOCH_MS_MIN = 10**11  # a recorded start this large is in epoch milliseconds (ticks since boot never get there)


def process_start_time(pid: int) -> str | None:
    """The start time of a process (zombies too), or None if unknown or gone: with the pid, its identity."""
    if pid <= 0:
        return None
    for _ in range(3):
        try:
            boot = psutil.boot_time()
            created = psutil.Process(pid).create_time()
            # Both are wall-clock times that move with the system clock; their difference does not, unless the
            # clock moved between the two reads, which the second read of the boot time would show.
            if psutil.boot_time() == boot:
                return str(round((created - boot) * _TICKS_PER_S))
        except (psutil.Error, OSError):
            return None
    return None


def _epoch_ms(pid: int) -> str | None:
    try:
        return str(round(psutil.Process(pid).create_time() * 1000))
    except (psutil.Error, OSError):
        return None


def _started_at(pid: int, start_time: str) -> bool | None:
    """Whether the process `pid` is the one started at `start_time`; None when there is no such process."""
    current = process_start_time(pid)
    if current is None:
        return None
    if current == start_time:
        return True
    # Runs recorded off Linux before psutil was used everywhere kept the creation time in epoch milliseconds.
    return start_time.isdigit() and int(start_time) >= _EPOCH_MS_MIN and _epoch_ms(pid) == start_time


def _running(pid: int) -> bool:
    """True when a process with this pid exists and is neither a zombie nor dead."""
    try:
        return psutil.Process(pid).status() not in _GONE
    except (psutil.Error, OSError):
        return False


def is_alive(pid: int | None, start_time: str | None) -> bool:
    """True when the process with this pid and start time still runs (zombies count as gone).

    A None start time (not recorded) checks the pid alone: enough to say "running", never enough to signal it.
    """
    if not pid or pid <= 0 or not _running(pid):
        return False
    return start_time is None or _started_at(pid, start_time) is True


def is_ours(pid: int | None, start_time: str | None) -> bool:
    """True when a process (zombies too) with this pid exists and provably is the one started at `start_time`."""
    return bool(pid and pid > 0 and start_time is not None and _started_at(pid, start_time) is True)


def pid_reused(pid: int | None, start_time: str | None) -> bool:
    """True when a process with this pid exists but was not started at `start_time`: the pid was reused."""
    return bool(pid and pid > 0 and start_time is not None and _started_at(pid, start_time) is False)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def group_alive(pgid: int, start_time: str | None = None) -> bool:
    """True while any process of the group exists (zombies excluded).

    With `start_time` (the leader's), a group whose leader pid now belongs to another process is not this one: False.
    """
    if not pgid or pgid <= 0 or (start_time is not None and pid_reused(pgid, start_time)):
        return False
    return any(_pgid(pid) == pgid and _running(pid) for pid in psutil.pids())


def signal_group(pid: int | None, start_time: str | None, sig: int, leftovers: bool = False) -> bool:
    """Send `sig` to the run's process group (the job is its leader), only if it is still the run's; True if sent.

    The group is signalled when its leader `pid` is still the process started at `start_time` (a zombie leader
    counts: its pid cannot be reused before it is reaped). A pid that now belongs to another process (other start
    time), or an unknown start time, is never signalled. `leftovers`: the caller saw the leader alive at its
    previous check and it has vanished since; the group's remaining processes are then signalled too, because
    Linux never hands out a pid that is still some process's group id, so a group of that id is still the run's.
    """
    if not pid or pid <= 1 or start_time is None:
        return False
    ours = _started_at(pid, start_time)
    if ours is False or (ours is None and not (leftovers and group_alive(pid))):
        return False
    try:
        os.killpg(pid, sig)
        return True
    except ProcessLookupError:
        return False
