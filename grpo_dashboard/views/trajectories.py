"""Agent trajectories of a run, without gradio: each sample of `samples.jsonl` as the conversation it was (turns,
tool calls with arguments, results, failures, final answer) with its per-reward scores, weighted total and
advantage; filter by environment or any `log_extra` column, sort by reward, advantage, turns or tool calls.

Tool calls are read by the job's own `grpo_agents.tool_turns` (the process rewards use the same reading).
"""

from __future__ import annotations

import html
import json
import math
from typing import Any

import pandas as pd

from grpo_dashboard.spec.jobfiles import agents_module

SORTS = ("total reward", "advantage", "turns", "tool calls", "failed calls", "original order")


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(float(value)) else None


def _messages(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"role": "assistant", "content": value}]
    return [m for m in (value or []) if isinstance(m, dict)]


def trajectory(row: dict[str, Any], weights: dict[str, float] | None = None) -> dict[str, Any]:
    """One sample as a trajectory: `turns` (role, content, calls with name/arguments/result/failed/error), the final
    answer, per-reward scores, the weighted total (None rewards skipped, as TRL's nansum), advantage and extras."""
    agents = agents_module()
    weights = weights or {}
    completion = _messages(row.get("completion"))
    calls = agents.tool_turns(completion, agents.sample_outcomes(row.get("tool_outcomes")))
    queue = list(calls)
    turns: list[dict[str, Any]] = [
        {"role": m.get("role", "?"), "content": str(m.get("content") or ""), "calls": []}
        for m in _messages(row.get("prompt"))
    ]
    for m in completion:
        turn = {"role": m.get("role", "?"), "content": m.get("content"), "calls": []}
        if m.get("role") == "assistant":
            for _ in m.get("tool_calls") or []:
                if queue:
                    turn["calls"].append(queue.pop(0))
        elif m.get("role") == "tool":
            content = m.get("content")
            turn["content"] = content if isinstance(content, str) else json.dumps(content, default=str)
            turn["failed"] = agents.is_failure(turn["content"])
            turn["error"] = agents.failure_text(turn["content"]) if turn["failed"] else None
        turns.append(turn)
    final = next(
        (
            str(m.get("content") or "")
            for m in reversed(completion)
            if m.get("role") == "assistant" and not m.get("tool_calls")
        ),
        "",
    )
    rewards = {k: _num(v) for k, v in (row.get("rewards") or {}).items()}
    present = [weights.get(k, 1.0) * v for k, v in rewards.items() if v is not None]
    return {
        "step": row.get("step"),
        "turns": turns,
        "final_answer": final,
        "rewards": rewards,
        "total": sum(present) if present else None,
        "advantage": _num(row.get("advantage")),
        "n_turns": sum(1 for m in completion if m.get("role") == "assistant"),
        "n_tool_calls": sum(c["outcome"] != "not_run" for c in calls),  # the calls TRL ran (its tools/* count these)
        "n_failed": sum(c["failed"] for c in calls),
        "n_dropped": sum(c["outcome"] == "dropped" for c in calls),
        "malformed": agents.malformed_calls(completion),
        "extra": dict(row.get("extra") or {}),
    }


def filter_values(rows: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Each extra column (environment, task, log_extra columns) and its distinct values in these rows."""
    out: dict[str, list[str]] = {}
    for row in rows:
        for k, v in (row.get("extra") or {}).items():
            values = out.setdefault(k, [])
            if str(v) not in values:
                values.append(str(v))
    return out


def trajectories(
    rows: list[dict[str, Any]],
    weights: dict[str, float] | None = None,
    filters: dict[str, str] | None = None,
    sort_by: str = SORTS[0],
    descending: bool = True,
) -> list[dict[str, Any]]:
    """The step's trajectories, those whose extra columns equal `filters`, sorted (ties keep their order)."""
    out = [
        trajectory(r, weights) | {"index": i}
        for i, r in enumerate(rows)
        if all(str((r.get("extra") or {}).get(k)) == str(v) for k, v in (filters or {}).items() if v)
    ]
    key = {
        "total reward": "total",
        "advantage": "advantage",
        "turns": "n_turns",
        "tool calls": "n_tool_calls",
        "failed calls": "n_failed",
    }.get(sort_by)
    if key is not None:
        present = [t for t in out if t[key] is not None]
        missing = [t for t in out if t[key] is None]
        present.sort(key=lambda t: t[key], reverse=descending)
        out = present + missing
    elif not descending:
        out.reverse()
    return out


def summary_frame(trajs: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per trajectory: index, extras, turns, tool calls, failures, dropped results, final answer, rewards,
    total, advantage."""
    records = [
        {
            "#": t["index"],
            **{k: v for k, v in t["extra"].items()},
            "turns": t["n_turns"],
            "tool calls": t["n_tool_calls"],
            "failed": t["n_failed"],
            "results dropped": t["n_dropped"],
            "final answer": t["final_answer"][:80],
            **t["rewards"],
            "total reward": t["total"],
            "advantage": t["advantage"],
        }
        for t in trajs
    ]
    return pd.DataFrame(records)


def _fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:.3g}"


def _unreturned(call: dict[str, Any]) -> str:
    """What became of a call whose result is not in the trajectory (empty for a returned call)."""
    outcome = call.get("outcome")
    if outcome == "dropped":
        size = f" ({call['result_chars']} characters)" if call.get("result_chars") else ""
        how = f"❌ failed: `{html.escape(str(call.get('error') or ''))}`" if call["failed"] else "ran"
        return (
            f" · {how}; TRL dropped its result{size}, which would have passed max_completion_length "
            "(counted in tools/*)"
        )
    if outcome == "not_run":
        return " · not run: the tool loop had ended (max_tool_calling_iterations)"
    if outcome == "no_result":
        return " · no result in the trajectory"
    return ""


def markdown(traj: dict[str, Any]) -> str:
    """A trajectory as Markdown: one line per turn, tool calls as `name(args)`, failed results in bold with ❌."""
    lines = [
        f"**#{traj.get('index', '')}** · total {_fmt(traj['total'])} · advantage {_fmt(traj['advantage'])} · "
        + " · ".join(f"{k} {_fmt(v)}" for k, v in traj["rewards"].items())
        + ("".join(f" · {k}={v}" for k, v in traj["extra"].items()))
    ]
    for turn in traj["turns"]:
        role = turn["role"]
        text = html.escape(str(turn["content"] or ""))
        if role == "tool":
            if turn.get("failed"):
                lines.append(f"- ❌ **tool failed:** `{html.escape(str(turn['error']))}`")
            else:
                lines.append(f"- 🔧 tool → `{text}`")
            continue
        calls = "".join(
            f" → call `{c['name']}({json.dumps(c['arguments'], default=str)})`"
            + (" ⚠️ repeats a failed call" if c["repeated_failure"] else "")
            + _unreturned(c)
            for c in turn["calls"]
        )
        lines.append(f"- **{role}:** {text}{calls}")
    lines.append(f"- **final answer:** `{html.escape(traj['final_answer'])}`")
    return "\n".join(lines)
