"""Pre-launch checks of `openenv:` environments (jobs/grpo_openenv.py): the target's form, then a probe in a child
process that does what the job will do with the real openenv-core client: start the server when the run owns it
(`openenv:package.module:app`) or reach the given one (`openenv:http://...`), read its /health and /schema, build
the tool from the action's fields (types TRL can pass, transformers' tool schema), reset once and step once with
sample arguments, then stop the server it started. openenv-core is never imported by the dashboard process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

from grpo_dashboard.checks.named import Check, CheckInput
from grpo_dashboard.errors import FieldError
from grpo_dashboard.spec.jobfiles import JOBS_DIR

PROBE_TIMEOUT_S = 120.0
ENVIRONMENTS = "agent.environments"  # facts key shared with checks/agents.py (what each environment offers)
MARKER = "@@OPENENV_PROBE@@ "


def openenv_targets(inp: CheckInput) -> list[tuple[str, str]]:
    """(field, target) of every `openenv:` environment of the spec."""
    a = inp.spec.agent
    if a is None:
        return []
    return [
        ("agent.environment_factory" + (f".{name}" if name is not None else ""), target)
        for name, target in a.environments.items()
        if target.startswith("openenv:")
    ]


def run_probe(target: str, timeout_s: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """The probe's answer for one target (`grpo_openenv.py probe`), or {"error": why it gave none}."""
    try:
        res = subprocess.run(
            [sys.executable, str(JOBS_DIR / "grpo_openenv.py"), "probe", target],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd=str(JOBS_DIR),
        )
    except subprocess.TimeoutExpired:
        return {"error": f"the probe did not finish in {timeout_s:.0f} s"}
    lines = [line[len(MARKER) :] for line in res.stdout.splitlines() if line.startswith(MARKER)]
    if not lines:
        return {"error": f"the probe exited with status {res.returncode}: {res.stderr.strip()[-300:]}"}
    return dict(json.loads(lines[-1]))


def _openenv(inp: CheckInput) -> Iterator[FieldError]:
    targets = openenv_targets(inp)
    if not targets:
        return
    from grpo_dashboard.spec.jobfiles import agents_module

    grpo_openenv = agents_module().grpo_openenv
    envs: dict[str, Any] = inp.facts.setdefault(ENVIRONMENTS, {})
    for where, target in targets:
        try:
            grpo_openenv.split(target)
        except ValueError as exc:
            yield FieldError(where, target, str(exc).split(": ", 1)[1])
            continue
        if inp.facts.get("agent.run_code", True) is False:
            continue
        answer = run_probe(target)
        problems = list(answer.get("problems") or [])
        if "error" in answer or any("No module named 'openenv'" in p for p in problems):
            why = answer.get("error") or "openenv-core is not installed for the dashboard's Python"
            yield FieldError(
                where, target, f"could not be checked here ({why}); the job checks it when it starts.", "warning"
            )
            continue
        if problems:
            started = "the server the run would start" if answer.get("started") else f"the server {answer.get('url')}"
            yield FieldError(
                where,
                target,
                f"{started} failed the OpenEnv check: "
                + "; ".join(problems)
                + ". An OpenEnv environment needs a server answering /health, /schema and a WebSocket session "
                "(reset, step), and an action whose own fields are strings, integers, numbers or booleans (they "
                "become the tool's arguments).",
            )
            continue
        envs[where] = {"tools": [answer.get("tool")], "get_reward": True, "openenv": answer.get("arguments")}


OPENENV_CHECKS = [Check("agent.openenv", ("agent.environment_factory",), _openenv)]
