"""Rules for tool-using, multi-turn runs: tool failures, tool-use collapse, turn limit, malformed calls, one task
regressing, and async GRPO staleness. They read TRL's `tools/*` metrics, the job's `agent/*` and `tasks/*` metrics
and async GRPO's `sample/*`; a run without those metrics (no tools) gets none of these findings.
"""

from __future__ import annotations

import numpy as np

from .findings import ERROR, WARNING, Context, Finding, make_finding
from .series import Series, fmt, trailing_mean, trailing_streak


def _series(ctx: Context, key: str) -> Series | None:
    s = ctx.frame.get(key)
    if s is None:
        return None
    s = s.finite()
    return s if len(s) else None


def _smoothed(ctx: Context, s: Series) -> np.ndarray:
    return trailing_mean(s.values, ctx.smooth_n(len(s)))


def _onset(s: Series, mask: np.ndarray) -> int:
    streak = trailing_streak(mask)
    return int(s.steps[-streak]) if streak else int(s.steps[-1])


def _evidence(ctx: Context, s: Series, streak: int, persist: int) -> str:
    """How much the finding rests on: agent metrics are logged on some records only (a sparse log)."""
    total = ctx.frame.n_records
    text = f" Evidence: {streak} of the {len(s)} logs that carry {s.key}"
    text += f" ({total} records in all)." if total > len(s) else "."
    if streak < persist:
        text += f" Fewer than the {persist} logs a sustained state needs: a first reading, to be confirmed."
    return text


def _dropped(ctx: Context, streak: int) -> tuple[str, str]:
    """The text and remedy clause when TRL dropped many results lately (`agent/dropped_result_ratio`): those calls
    still count in tools/*, and a long error text makes a failure the model never reads."""
    s = _series(ctx, "agent/dropped_result_ratio")
    if s is None:
        return "", ""
    share = float(np.mean(s.values[-max(1, streak) :]))
    if share < ctx.t("tool_failures.dropped"):
        return "", ""
    return (
        f" TRL dropped the results of {fmt(share * 100)}% of those calls for exceeding max_completion_length "
        "(agent/dropped_result_ratio; the trajectory view marks them), so the model never read them.",
        "; raise max_completion_length or keep tool results and error texts short",
    )


def check_tool_failures(ctx: Context) -> list[Finding]:
    """A high (or steadily rising) share of tool calls fails: TRL feeds `{"error": ...}` back as the result."""
    s = _series(ctx, "tools/failure_frequency")
    calls = _series(ctx, "tools/call_frequency")
    if s is None or calls is None or not np.any(calls.values > 0):
        return []
    persist = int(ctx.t("tool_failures.persist"))
    sm = _smoothed(ctx, s)
    need = min(persist, max(1, len(s) // 2))
    for level, severity in ((ctx.t("tool_failures.error"), ERROR), (ctx.t("tool_failures.warn"), WARNING)):
        mask = sm >= level
        streak = trailing_streak(mask)
        if streak >= need:
            dropped, fix = _dropped(ctx, streak)
            # Sparse logs: too few logs for a sustained state are a warning at most, and say so.
            return [
                make_finding(
                    "tool_failures",
                    severity if streak >= persist else WARNING,
                    _onset(s, mask),
                    f"{fmt(float(sm[-1]) * 100)}% of tool calls fail (tools/failure_frequency, smoothed) for the last "
                    f"{streak} log{'s' if streak != 1 else ''}." + dropped + _evidence(ctx, s, streak, persist),
                    "read the failing calls in the trajectory view (the exception text is the tool result): fix the "
                    "tool or its docstring so the model learns valid arguments, catch expected errors inside the tool "
                    "and return a helpful message, or add the repeated_failure_penalty / tool_success process rewards"
                    + fix,
                    "tools/failure_frequency",
                    value=float(sm[-1]),
                    threshold=float(level),
                )
            ]
    n = len(s)
    if n >= 2 * persist:
        head, tail = float(np.mean(s.values[: n // 3])), float(np.mean(s.values[-(n // 3) :]))
        if tail - head >= ctx.t("tool_failures.rise"):
            return [
                make_finding(
                    "tool_failures",
                    WARNING,
                    int(s.steps[n // 3]),
                    f"tool failures are rising: {fmt(head * 100)}% early, {fmt(tail * 100)}% lately.",
                    "read the latest failing calls in the trajectory view; a policy drifting into invalid arguments "
                    "needs a lower learning_rate or a process reward for successful calls (tool_success)",
                    "tools/failure_frequency",
                    early=head,
                    late=tail,
                )
            ]
    return []


def check_tool_use_collapse(ctx: Context) -> list[Finding]:
    """The agent used tools, then stopped calling them."""
    s = _series(ctx, "tools/call_frequency")
    if s is None:
        return []
    sm = _smoothed(ctx, s)
    peak_i = int(np.argmax(sm))
    peak = float(sm[peak_i])
    if peak < ctx.t("tool_use_collapse.min_peak"):
        return []
    low = sm <= ctx.t("tool_use_collapse.ratio") * peak
    streak = trailing_streak(low)
    if streak < int(ctx.t("tool_use_collapse.persist")) or len(s) - streak <= peak_i - 1:
        return []
    return [
        make_finding(
            "tool_use_collapse",
            ERROR,
            _onset(s, low),
            f"the agent stopped calling tools: tools/call_frequency fell from {fmt(peak)} calls per episode to "
            f"{fmt(float(s.values[-1]))} for the last {streak} logs.",
            "check whether tool calls were punished (failures, length penalties, a reward reachable without tools): "
            "reward successful calls (tool_success), lower learning_rate, and read the trajectories before the drop",
            "tools/call_frequency",
            peak=peak,
            last=float(s.values[-1]),
        )
    ]


def check_turn_limit(ctx: Context) -> list[Finding]:
    """Episodes end because they ran out of tool-calling rounds (max_tool_calling_iterations)."""
    s = _series(ctx, "agent/turn_limit_ratio")
    if s is None:
        return []
    sm = _smoothed(ctx, s)
    mask = sm >= ctx.t("turn_limit.warn")
    persist = int(ctx.t("turn_limit.persist"))
    need = min(persist, max(1, len(s) // 2))
    if trailing_streak(mask) < need:
        return []
    limit = ctx.config.now("max_tool_calling_iterations")
    evidence = _evidence(ctx, s, trailing_streak(mask), persist)
    return [
        make_finding(
            "turn_limit",
            WARNING,
            _onset(s, mask),
            f"{fmt(float(sm[-1]) * 100)}% of episodes used every tool-calling round and were cut off "
            f"(max_tool_calling_iterations{limit})." + evidence,
            "raise max_tool_calling_iterations (and max_completion_length, which bounds the whole trajectory), or "
            "reward finishing with an answer; check the trajectories for loops calling the same tool",
            "agent/turn_limit_ratio",
            value=float(sm[-1]),
        )
    ]


def check_malformed_tool_calls(ctx: Context) -> list[Finding]:
    """Tool calls the tokenizer could not parse (the turn stays plain text and no tool runs)."""
    s = _series(ctx, "agent/malformed_ratio")
    if s is None:
        return []
    sm = _smoothed(ctx, s)
    mask = sm >= ctx.t("malformed_tool_calls.warn")
    persist = int(ctx.t("malformed_tool_calls.persist"))
    need = min(persist, max(1, len(s) // 2))
    if trailing_streak(mask) < need:
        return []
    evidence = _evidence(ctx, s, trailing_streak(mask), persist)
    return [
        make_finding(
            "malformed_tool_calls",
            WARNING,
            _onset(s, mask),
            f"{fmt(float(sm[-1]) * 100)}% of episodes hold a tool call that could not be parsed." + evidence,
            "check that the tokenizer's response_template matches the chat template's tool-call format, warm the "
            "model on tool-calling examples (SFT), or reward well-formed calls",
            "agent/malformed_ratio",
            value=float(sm[-1]),
        )
    ]


def _task_series(ctx: Context, suffix: str) -> dict[str, Series]:
    out = {}
    for key in ctx.frame.columns:
        if key.startswith("tasks/") and key.endswith(suffix):
            s = _series(ctx, key)
            if s is not None and len(s) >= 2:
                out[key[len("tasks/") : -len(suffix)]] = s
    return out


def _column(task: str) -> str:
    """The sample column a task name comes from (``column/value``; older logs: no column)."""
    return task.rsplit("/", 1)[0] if "/" in task else ""


def check_task_regression(ctx: Context) -> list[Finding]:
    """One environment or task regresses, or loses all reward variance, while the others improve."""
    means = _task_series(ctx, "/reward_mean")
    if len(means) < 2:
        return []
    k_of = lambda s: max(2, len(s) // 3)  # noqa: E731
    gains = {t: float(np.mean(s.values[-k_of(s) :]) - np.mean(s.values[: k_of(s)])) for t, s in means.items()}
    scale = max(1e-9, max(float(np.ptp(s.values)) for s in means.values()))
    drop = ctx.t("task_regression.min_drop") * scale
    out: list[Finding] = []
    for task, gain in gains.items():
        # Tasks are compared within their column (``tasks/<column>/<value>/...``): each column splits the same
        # samples, so another column's view of the regressing rows is not one of "the others".
        others = [g for t, g in gains.items() if t != task and _column(t) == _column(task)]
        if others and gain <= -drop and all(g >= 0 for g in others) and max(others) > drop:
            s = means[task]
            out.append(
                make_finding(
                    "task_regression",
                    WARNING,
                    int(s.steps[len(s) // 3]),
                    f"task {task} regresses (reward {fmt(gain)}) while the others improve (best {fmt(max(others))}).",
                    "rebalance the task mix (more rows of the regressing task, or a per-task reward weight), and read "
                    "its trajectories in the trajectory view (filter by the task column)",
                    f"tasks/{task}/reward_mean",
                    gain=gain,
                )
            )
    stds = _task_series(ctx, "/reward_std")
    persist = int(ctx.t("task_regression.persist"))
    for task, s in stds.items():
        flat = s.values <= 1e-9
        other_stds = [o for t, o in stds.items() if t != task and _column(t) == _column(task)]
        if (
            trailing_streak(flat) >= min(persist, len(s))
            and other_stds
            and all(float(o.values[-1]) > 1e-9 for o in other_stds)
            and gains.get(task, 0.0) <= 0
        ):
            out.append(
                make_finding(
                    "task_regression",
                    WARNING,
                    _onset(s, flat),
                    f"task {task} lost all reward variance (reward_std 0 for {trailing_streak(flat)} logs): "
                    "its groups give no gradient while the other tasks still learn.",
                    "make the task harder or easier (its rewards are all equal), raise temperature or num_generations",
                    f"tasks/{task}/reward_std",
                )
            )
    return out


def check_async_staleness(ctx: Context) -> list[Finding]:
    """Async GRPO: rollouts dropped for being older than max_staleness, rollouts used at the staleness limit, or an
    empty rollout queue stalling training (AsyncGRPOTrainer's sample/* and perf/* metrics)."""
    out: list[Finding] = []
    limit = ctx.config.number("max_staleness")
    dropped = _series(ctx, "sample/dropped_stale_total")
    if dropped is not None and len(dropped) >= 2 and dropped.values[-1] > dropped.values[0]:
        out.append(
            make_finding(
                "async_staleness",
                WARNING,
                int(dropped.steps[int(np.argmax(dropped.values > dropped.values[0]))]),
                f"{fmt(float(dropped.values[-1] - dropped.values[0]))} rollouts were dropped for being older than "
                f"max_staleness{ctx.config.now('max_staleness')}: generation outruns training and is wasted.",
                "raise max_staleness, lower max_inflight_tasks or queue_maxsize, or speed up training "
                "(weight_sync_steps)",
                "sample/dropped_stale_total",
            )
        )
    stale = _series(ctx, "sample/staleness_mean")
    if stale is not None and limit is not None and limit > 0:
        mask = _smoothed(ctx, stale) >= ctx.t("async_staleness.near") * limit
        if trailing_streak(mask) >= min(int(ctx.t("async_staleness.persist")), len(stale)):
            out.append(
                make_finding(
                    "async_staleness",
                    WARNING,
                    _onset(stale, mask),
                    f"rollouts are {fmt(float(stale.values[-1]))} policy versions old on average, close to "
                    f"max_staleness ({fmt(limit)}): the updates are computed on stale samples.",
                    "sync weights more often (weight_sync_steps) or add generation capacity",
                    "sample/staleness_mean",
                )
            )
    queue = _series(ctx, "sample/rollout_queue_size")
    wait, step = _series(ctx, "perf/rollout_wait_s"), _series(ctx, "perf/step_s")
    if queue is not None and len(queue) >= 3:
        empty = queue.values <= 0
        streak = trailing_streak(empty)
        share = (
            float(np.mean(wait.values[-streak:])) / max(1e-9, float(np.mean(step.values[-streak:])))
            if wait is not None and step is not None and streak
            else None
        )
        if streak >= min(int(ctx.t("async_staleness.persist")), len(queue)) and (share is None or share >= 0.3):
            waiting = f" (waiting {fmt(share * 100)}% of each step)" if share is not None else ""
            out.append(
                make_finding(
                    "async_staleness",
                    WARNING,
                    _onset(queue, empty),
                    f"the rollout queue has been empty for {streak} logs{waiting}: training waits for the vLLM "
                    "server.",
                    "add generation capacity (vLLM replicas, tensor parallelism) or raise max_inflight_tasks",
                    "sample/rollout_queue_size",
                )
            )
    return out
