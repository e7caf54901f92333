"""What grpo_job.py builds from the settings a TRL recipe brings: LoRA / QLoRA, a chat template override, reward
models, dataset mixtures and streaming, and the sample records a remote job prints for the dashboard.

Self-contained like its siblings (no grpo_dashboard import); torch, peft, transformers and trl load inside functions.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

SAMPLE_MARKER = "@@GRPO_DASHBOARD_SAMPLE@@ "  # stdout prefix of one sample completion (remote jobs)
SAMPLES_STDOUT_ENV = "GRPO_JOB_SAMPLES_STDOUT"  # "1": also print each sample behind SAMPLE_MARKER


def peft_config(lora: Mapping[str, Any] | None) -> Any:
    """peft.LoraConfig from the spec's `model.lora` (every field TRL's get_peft_config passes), or None."""
    if lora is None:
        return None
    from peft import LoraConfig

    return LoraConfig(**{k: v for k, v in dict(lora).items() if v is not None})


def quantization_config(model_spec: Mapping[str, Any]) -> Any:
    """transformers.BitsAndBytesConfig from `model.quantization` (as TRL's get_quantization_config), or None."""
    q = model_spec.get("quantization")
    if not q:
        return None
    from transformers import BitsAndBytesConfig

    if int(q["bits"]) == 8:
        return BitsAndBytesConfig(load_in_8bit=True)
    dtype = model_spec.get("dtype")
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_compute_dtype=None if dtype in (None, "auto") else dtype,
        bnb_4bit_quant_type=q["quant_type"],
        bnb_4bit_use_double_quant=bool(q["double_quant"]),
        bnb_4bit_quant_storage=q.get("quant_storage"),
    )


def processing_class(model_path: str, model_spec: Mapping[str, Any]) -> Any:
    """The tokenizer with `model.chat_template` in place of its own, or None to let TRL load it unchanged."""
    template = model_spec.get("chat_template")
    if not template:
        return None
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        model_path, revision=model_spec.get("revision"), trust_remote_code=bool(model_spec.get("trust_remote_code"))
    )
    tokenizer.chat_template = template
    return tokenizer


def load_mixture(ds_spec: Mapping[str, Any]) -> tuple[Any, Any]:
    """(train, eval or None) of `dataset.mixture` through TRL's own `get_dataset` (DatasetMixtureConfig)."""
    from trl import DatasetMixtureConfig, get_dataset

    config = DatasetMixtureConfig(
        datasets=[dict(e) for e in ds_spec["mixture"]],
        streaming=bool(ds_spec.get("streaming")),
        test_split_size=ds_spec.get("test_split_size"),
    )
    data = get_dataset(config)
    return data["train"], data["test"] if "test" in data else None


def print_sample(row: dict[str, Any], default: Any) -> None:
    """Print one sample record behind SAMPLE_MARKER when asked (a remote job's samples reach the dashboard)."""
    if os.environ.get(SAMPLES_STDOUT_ENV) == "1":
        sys.stdout.write(SAMPLE_MARKER + json.dumps(row, default=default) + "\n")


SYSTEM_INTERVAL_ENV = "GRPO_JOB_SYSTEM_INTERVAL_S"  # seconds between GPU samples between logs (0: only at logs)
SYSTEM_GPUS_ENV = "GRPO_JOB_SYSTEM_GPUS"  # "0": no GPU samples (HF Jobs: the dashboard samples the Hub's metrics)
DEFAULT_SYSTEM_INTERVAL_S = 10.0


def gpu_metrics() -> dict[str, float]:
    """Utilisation (%) and memory (GB, % of total) of each visible CUDA GPU as `system/gpu<i>/...` ({} without
    CUDA). Memory used is the device's (NVML: every process) where torch can read it, else this process's
    reserved memory; `memory_allocated_gb` / `memory_reserved_gb` are this process's."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return {}
    out: dict[str, float] = {}
    for i in range(torch.cuda.device_count()):
        g = f"system/gpu{i}/"
        reserved = torch.cuda.memory_reserved(i)
        out[g + "memory_allocated_gb"] = torch.cuda.memory_allocated(i) / 1e9
        out[g + "memory_reserved_gb"] = reserved / 1e9
        used, total = reserved, torch.cuda.get_device_properties(i).total_memory
        try:
            used = torch.cuda.device_memory_used(i)
            out[g + "utilization"] = float(torch.cuda.utilization(i))
        except Exception:  # pynvml missing or no NVML: this process's memory only
            pass
        out[g + "memory_used_gb"] = used / 1e9
        out[g + "memory_total_gb"] = total / 1e9
        out[g + "memory_pct"] = 100.0 * used / total if total else float("nan")
    return out


def process_metrics(last: tuple[float, float] | None) -> tuple[dict[str, float], tuple[float, float]]:
    """(metrics, clock) for this process: resident memory (`system/process/rss_gb`) and, given the clock of the
    previous call, its CPU use since then in % of one core (`system/process/cpu_pct`)."""
    out: dict[str, float] = {}
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            out["system/process/rss_gb"] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e9
    except (OSError, ValueError, IndexError):
        import resource  # no /proc: the peak resident size is what is left (KiB on Linux, bytes on macOS)

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out["system/process/rss_gb"] = peak / (1e9 if sys.platform == "darwin" else 1e6)
    clock = (time.monotonic(), time.process_time())
    if last is not None and clock[0] > last[0]:
        out["system/process/cpu_pct"] = 100.0 * (clock[1] - last[1]) / (clock[0] - last[0])
    return out, clock


class SystemSampler:
    """System samples of the job as protocol records of split `system`, stepped by their wall time in ms (they fall
    between logging steps): this process's CPU and memory at every log, and the GPUs' (CUDA only) also on a timer
    between logs, so long steps are charted too. The timer thread starts only with CUDA (and GPU samples on)."""

    def __init__(self, emit: Any, interval_s: float | None = None) -> None:
        self._emit = emit
        self.gpus = os.environ.get(SYSTEM_GPUS_ENV) != "0"
        if interval_s is None:
            try:
                interval_s = float(os.environ.get(SYSTEM_INTERVAL_ENV) or DEFAULT_SYSTEM_INTERVAL_S)
            except ValueError:
                interval_s = DEFAULT_SYSTEM_INTERVAL_S
        self.interval_s = interval_s
        self._clock: tuple[float, float] | None = None
        self._last_ms = -1
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> dict[str, Any]:
        """Take one sample and emit it; returns the record."""
        with self._lock:
            metrics, self._clock = process_metrics(self._clock)
            if self.gpus:
                metrics.update(gpu_metrics())
            now = time.time()
            self._last_ms = step = max(int(now * 1000), self._last_ms + 1)  # unique even within one millisecond
            record = {"type": "log", "split": "system", "step": step, "time": now, "metrics": metrics}
            self._emit(record)
            return record

    def start(self) -> SystemSampler:
        """Start the timer thread when CUDA is there and the interval is positive (else samples come only at logs)."""
        torch = sys.modules.get("torch")
        if (
            self.interval_s > 0
            and self.gpus
            and torch is not None
            and torch.cuda.is_available()
            and self._thread is None
        ):
            self._thread = threading.Thread(target=self._run, name="grpo-system-sampler", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sample()
            except Exception:  # a failed sample must never stop training
                pass

    def stop(self) -> None:
        """Stop the timer thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
