"""What this machine's CUDA would show, found without importing torch (seconds and a thousand modules).

The dashboard process and `validate` need the number of GPUs a local job would see (`torch.cuda.device_count()`
with CUDA_VISIBLE_DEVICES applied) and whether torch has torch.distributed (FSDP presets). When torch is already
imported it is asked; otherwise the GPUs come from the NVIDIA driver (`nvidia-smi -L`, else /proc/driver/nvidia),
filtered by CUDA_VISIBLE_DEVICES as CUDA does, and torch.distributed from a short subprocess (only for the specs
that name an FSDP preset).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

NVIDIA_PROC = Path("/proc/driver/nvidia")
ROCM_DEVICE = Path("/dev/kfd")
PROBE_TIMEOUT_S = 10.0
_GPU_LINE = re.compile(r"^GPU (\d+): .*\(UUID: (GPU-[0-9a-fA-F-]+)\)")
_MIG_LINE = re.compile(r"^\s+MIG .*\(UUID: (MIG-[^)\s]+)\)")


def _devices_from_smi() -> list[tuple[str, str, list[str]]] | None:
    """(index, GPU UUID, MIG UUIDs) per GPU from `nvidia-smi -L`; None when it is missing or fails."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    gpus: list[tuple[str, str, list[str]]] = []
    for line in done.stdout.splitlines():
        if m := _GPU_LINE.match(line):
            gpus.append((m.group(1), m.group(2), []))
        elif (m := _MIG_LINE.match(line)) and gpus:
            gpus[-1][2].append(m.group(1))
    return gpus


@functools.cache
def _physical() -> list[tuple[str, str, list[str]]] | None:
    gpus = _devices_from_smi()
    if gpus is not None:
        return gpus
    try:
        found = sorted(p.name for p in (NVIDIA_PROC / "gpus").iterdir())
        return [(str(i), "", []) for i in range(len(found))]
    except OSError:
        pass
    # No NVIDIA driver: CUDA sees nothing, unless this is a ROCm machine, which the driver files cannot tell.
    return None if ROCM_DEVICE.exists() else []


def _visible(gpus: list[tuple[str, str, list[str]]], setting: str) -> int:
    """How many devices CUDA enumerates under CUDA_VISIBLE_DEVICES=`setting` (it stops at the first bad entry)."""
    uuids = [u for _, uuid, migs in gpus for u in (uuid, *migs) if u]
    count = 0
    for raw in setting.split(","):
        item = raw.strip()
        if item.isdigit():
            ok = int(item) < len(gpus)
        elif item.startswith(("GPU-", "MIG-")):
            ok = not uuids or any(u.startswith(item) for u in uuids)  # /proc gives no UUIDs: trust the setting
        else:
            ok = False  # empty, negative (-1 hides every GPU) or not a device name
        if not ok:
            break
        count += 1
    return count


def gpu_count() -> int | None:
    """CUDA devices a job started from here would see (CUDA_VISIBLE_DEVICES applied); None when unknown."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            return int(torch.cuda.device_count())
        except Exception:  # a broken CUDA setup: unknown
            return None
    gpus = _physical()
    if gpus is None:
        return None
    setting = os.environ.get("CUDA_VISIBLE_DEVICES")
    if setting is not None:
        return _visible(gpus, setting)
    return sum(len(migs) or 1 for _, _, migs in gpus)


def has_cuda() -> bool:
    """True when a job started from here would find a CUDA GPU (torch.cuda.is_available(), without torch)."""
    return (gpu_count() or 0) > 0


@functools.cache
def distributed_available() -> bool:
    """torch.distributed.is_available() of the installed torch (False without torch); a subprocess when torch is not
    imported here."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            import torch.distributed

            return bool(torch.distributed.is_available())
        except ImportError:
            return False
    try:
        if importlib.util.find_spec("torch") is None:
            return False
    except (ImportError, ValueError):
        return False
    try:
        done = subprocess.run(
            [sys.executable, "-c", "import torch.distributed as d; print(d.is_available())"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.stdout.strip().endswith("True")
