"""How long `validate` of the smoke spec and the app's build take in a fresh process, and how many modules they
import, against what the old path paid on top: importing trl for GRPOConfig's field list.

Each figure is the median of `--repeat` fresh interpreters (the files are in the page cache after the first, as on
any machine that ran Python before). The targets (< 2 s each) are for a quiet machine; on a loaded one the absolute
times grow, the module counts and the ratio to `from trl import GRPOConfig` do not.

    python benchmarks/light_start.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import common

HEAVY = ("torch", "trl", "transformers", "accelerate", "peft")
COUNT = (
    "import json, sys; print('@@' + json.dumps({'modules': len(sys.modules), "
    "'heavy': sorted({m.split('.')[0] for m in sys.modules} & set(HEAVY))}))"
).replace("HEAVY", repr(HEAVY))
CASES = {
    "validate examples/smoke.yaml": "import sys\nfrom grpo_dashboard.__main__ import main\n"
    "code = main(['validate', 'examples/smoke.yaml'])\n",
    "build the app (build_app)": "from grpo_dashboard.ui import build_app\nbuild_app(monitor=False)\n",
    "import gradio (the app's floor)": "import gradio\n",
    "from trl import GRPOConfig (the old path's extra)": "from trl import GRPOConfig\n",
}


def fresh(code: str, env: dict[str, str]) -> tuple[float, dict[str, Any]]:
    """(seconds, {modules, heavy}) of `code` in a new interpreter run from the repository root."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code + COUNT], cwd=common.ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    seconds = time.perf_counter() - start
    line = next((x for x in reversed(done.stdout.splitlines()) if x.startswith("@@")), None)
    if done.returncode != 0 or line is None:
        raise SystemExit(f"failed: {code!r}\n{done.stderr[-2000:]}")
    return seconds, json.loads(line[2:])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Measure and print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    common.print_machine()
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "PYTHONWARNINGS": "ignore",
        "PYTHONPATH": str(common.ROOT),
    }
    found: dict[str, dict[str, Any]] = {}
    for name, code in CASES.items():
        fresh(code, env)  # the page cache
        runs = [fresh(code, env) for _ in range(args.repeat)]
        found[name] = {"s": statistics.median(s for s, _ in runs), **runs[-1][1]}
        print(
            f"{name}: median {found[name]['s']:.2f} s of {args.repeat}, {found[name]['modules']} modules, "
            f"training stack imported: {found[name]['heavy'] or 'none'}"
        )
    trl = found["from trl import GRPOConfig (the old path's extra)"]
    rows = []
    for name in ("validate examples/smoke.yaml", "build the app (build_app)"):
        ours = found[name]
        rows.append(
            common.row(
                f"{name}, fresh process ({ours['modules']} modules; {trl['modules']} for trl)",
                f"{ours['s']:.2f} s",
                f"+{trl['s']:.2f} s (from trl import GRPOConfig, the old path)",
                common.ratio(ours["s"] + trl["s"], ours["s"]),
                "< 2 s, no torch/trl imported",
                ours["s"] < 2.0 and not ours["heavy"],
            )
        )
    print(common.TABLE_HEAD.replace("peer (trackio)", "peer (the old path's trl import)"))
    for line in rows:
        print(line)
    return found


if __name__ == "__main__":
    main()
