"""Hugging Face Jobs hardware flavors: usable memory, speed and price of each, and Jobs timeouts.

Prices come from hub-docs `jobs-pricing.md` (built in) or, when reachable, from the Hub's hardware list
(`GET /api/jobs/hardware`, cached for an hour). GPU memory is what the card reports as usable (e.g. an A10G shows
22.8 GB), speed is the peak dense bf16 FLOP/s and the memory bandwidth, used by `hardware.py`'s time estimate.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Flavor:
    """One Jobs hardware flavor: usable memory per device, speed, and price."""

    name: str
    gpu: str | None
    gpus: int
    memory_gib: float  # usable per GPU, or the RAM of a CPU flavor
    price_per_hour: float
    tflops: float  # peak dense bf16 per GPU (CPU: whole machine, rough)
    bandwidth_gbs: float
    bf16: bool = True
    source: str = "built-in"

    @property
    def is_gpu(self) -> bool:
        """True for GPU flavors."""
        return self.gpu is not None


# GPU model: usable GiB (what the card reports), peak dense bf16 TFLOP/s, memory bandwidth GB/s, bf16 support.
GPUS: dict[str, tuple[float, float, float, bool]] = {
    "T4": (15.0, 65, 320, False),
    "L4": (22.0, 121, 300, True),
    "L40S": (44.4, 362, 864, True),
    "A10G": (21.3, 70, 600, True),
    "A100": (79.1, 312, 2039, True),
    "H100": (79.1, 989, 3350, True),
    "H200": (139.8, 989, 4800, True),
    "RTX PRO 6000": (94.9, 500, 1792, True),
}
# Prices in $/h as Hugging Face publishes them for Jobs; the live hardware list replaces them when reachable.
_TABLE: list[tuple[str, str | None, int, float]] = [
    ("cpu-basic", None, 0, 0.01),
    ("cpu-upgrade", None, 0, 0.03),
    ("cpu-xl", None, 0, 1.00),
    ("cpu-performance", None, 0, 1.90),
    ("t4-small", "T4", 1, 0.40),
    ("t4-medium", "T4", 1, 0.60),
    ("l4x1", "L4", 1, 0.80),
    ("l4x4", "L4", 4, 3.80),
    ("l40sx1", "L40S", 1, 1.80),
    ("l40sx4", "L40S", 4, 8.30),
    ("l40sx8", "L40S", 8, 23.50),
    ("a10g-small", "A10G", 1, 1.00),
    ("a10g-large", "A10G", 1, 1.50),
    ("a10g-largex2", "A10G", 2, 3.00),
    ("a10g-largex4", "A10G", 4, 5.00),
    ("a100-large", "A100", 1, 2.50),
    ("a100x4", "A100", 4, 10.00),
    ("a100x8", "A100", 8, 20.00),
    ("h200", "H200", 1, 5.00),
    ("h200x2", "H200", 2, 10.00),
    ("h200x4", "H200", 4, 20.00),
    ("h200x8", "H200", 8, 40.00),
    ("rtx-pro-6000", "RTX PRO 6000", 1, 2.75),
    ("rtx-pro-6000x2", "RTX PRO 6000", 2, 5.50),
    ("rtx-pro-6000x4", "RTX PRO 6000", 4, 11.00),
    ("rtx-pro-6000x8", "RTX PRO 6000", 8, 22.00),
]
_CPU: dict[str, tuple[float, float, float]] = {
    "cpu-basic": (15.0, 0.1, 20),
    "cpu-upgrade": (30.0, 0.4, 40),
    "cpu-xl": (115.0, 0.8, 60),
    "cpu-performance": (238.0, 1.6, 100),
}


def _flavor(name: str, gpu: str | None, count: int, price: float, source: str = "built-in") -> Flavor:
    if gpu is None:
        mem, tf, bw = _CPU.get(name, (15.0, 0.1, 20))
        return Flavor(name, None, 0, mem, price, tf, bw, False, source)
    mem, tf, bw, bf16 = GPUS[gpu]
    return Flavor(name, gpu, count, mem, price, tf, bw, bf16, source)


BUILTIN_FLAVORS: dict[str, Flavor] = {row[0]: _flavor(*row) for row in _TABLE}
_live_cache: dict[str, tuple[float, dict[str, Flavor]]] = {}
LIVE_TTL_S = 3600.0
LIVE_CACHE_ENDPOINTS = 8


def flavors(token: str | bool | None = None, endpoint: str | None = None, live: bool = False) -> dict[str, Flavor]:
    """Flavors by name: the built-in table, with prices (and new flavors) from the Hub's hardware list when `live`.

    The live list is cached for an hour per endpoint; offline or on any error the built-in table is returned.
    """
    if not live:
        return dict(BUILTIN_FLAVORS)
    key = endpoint or "default"
    cached = _live_cache.get(key)
    if cached and time.monotonic() - cached[0] < LIVE_TTL_S:
        return dict(cached[1])
    try:
        from huggingface_hub import HfApi

        hardware = HfApi(endpoint=endpoint, token=token).list_jobs_hardware()
    except Exception:  # offline, logged out, or the endpoint is down: prices from the table
        return dict(BUILTIN_FLAVORS)
    out = dict(BUILTIN_FLAVORS)
    for hw in hardware:
        per = {"minute": 60.0, "hour": 1.0, "second": 3600.0}.get(str(hw.unit_label).lower(), 60.0)
        price = float(hw.unit_cost_usd) * per
        acc = hw.accelerator
        model = _gpu_model(acc.model) if acc else None
        if hw.name in out:
            out[hw.name] = replace(out[hw.name], price_per_hour=price, source="live")
        elif acc is None or model is not None:
            count = int(acc.quantity) if acc and str(acc.quantity).isdigit() else (1 if acc else 0)
            out[hw.name] = _flavor(hw.name, model, count, price, "live")
    if len(_live_cache) >= LIVE_CACHE_ENDPOINTS:  # one endpoint in practice; never grows without bound
        _live_cache.pop(next(iter(_live_cache)))
    _live_cache[key] = (time.monotonic(), out)
    return dict(out)


def _gpu_model(name: str) -> str | None:
    up = name.upper().replace("NVIDIA", "").strip()
    return next((g for g in GPUS if up == g or up.startswith(g)), None)


def parse_timeout(value: str | int | float | None) -> int | None:
    """Seconds from a Jobs timeout: a number of seconds, or `90m`, `2h`, `1.5h`, `1d`, `300s`; None if unset.

    Raises ValueError with the allowed forms for anything else.
    """
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", str(value))
    if not match:
        raise ValueError(f"{value!r} is not a timeout; use seconds (7200) or a duration like '90m', '2h', '1d'.")
    return int(float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)])


def format_duration(seconds: float) -> str:
    """`1h 25m` style text."""
    minutes = int(math.ceil(seconds / 60))
    return f"{minutes // 60}h {minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m"
