"""flash-attention on HF Jobs installs: the job gets `kernels` (transformers 5 then loads the Hub's prebuilt
kernels-community/flash-attn2), never `flash-attn` (no wheel for the image, a source build that needs torch at build
time); locally the check accepts either package and names both fixes."""

from __future__ import annotations

import subprocess
import sys

from grpo_dashboard.launch.hf_jobs.payload import job_command
from grpo_dashboard.launch.runs import validate
from grpo_dashboard.spec.job_deps import FLASH_KERNELS, job_deps
from grpo_dashboard.spec.run_spec import RunSpec


def _spec(kind: str, attn: str = "flash_attention_2") -> RunSpec:
    backend = {"kind": kind, **({"flavor": "a100-large", "namespace": "alice"} if kind == "hf_jobs" else {})}
    return RunSpec.from_dict(
        {
            "name": "fa",
            "model": {"name_or_path": "Qwen/Qwen2.5-0.5B-Instruct", "attn_implementation": attn},
            "dataset": {"path": "trl-lib/gsm8k"},
            "rewards": [{"name": "format", "builtin": "think_format"}],
            "backend": backend,
        }
    )


def test_transformers_falls_back_to_the_hub_kernels_we_install() -> None:
    """The mapping this relies on is transformers' own (read in a child: the dashboard never imports transformers)."""
    code = (
        "from transformers.modeling_flash_attention_utils import FLASH_ATTN_KERNEL_FALLBACK as F; "
        "print(F['flash_attention_2'], F['flash_attention_3'])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [FLASH_KERNELS["flash_attention_2"], FLASH_KERNELS["flash_attention_3"]]


def test_a_jobs_run_with_flash_attention_installs_kernels_not_flash_attn() -> None:
    for attn in FLASH_KERNELS:
        spec = _spec("hf_jobs", attn)
        assert [d.pip for d in job_deps(spec)] == ["kernels"]
        command = job_command(spec)
        assert "kernels" in command and not any("flash-attn" in x or "flash_attn" in x for x in command), command


def test_a_local_run_is_told_both_ways_to_get_flash_attention() -> None:
    spec = _spec("local")
    (dep,) = job_deps(spec)
    assert (dep.pip, dep.alternative) == ("flash-attn", "kernels")
    if dep.installed:  # this machine has one of them: nothing to say
        return
    (problem,) = [e for e in validate(spec).errors if e.field == "model.attn_implementation"]
    assert "`pip install kernels`" in problem.message and "--no-build-isolation" in problem.message
