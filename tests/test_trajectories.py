"""The trajectory view (pure data) and agent chart grouping, on sample rows in the job's samples.jsonl shape."""

from __future__ import annotations

from grpo_dashboard.views import charts, trajectories


def rows() -> list[dict]:
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "calculator", "arguments": {"expression": "1/0"}}}],
    }
    fail = {"role": "tool", "name": "calculator", "content": str({"error": "division by zero"})}
    good = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "2+3"}}}
            ],
        },
        {"role": "tool", "name": "calculator", "content": "5"},
        {"role": "assistant", "content": "5"},
    ]
    prompt = [{"role": "user", "content": "2+3"}]
    return [
        {
            "step": 3,
            "prompt": prompt,
            "completion": [call, fail, call, fail, {"role": "assistant", "content": "9"}],
            "rewards": {"answer": 0.0, "tool_success": 0.0},
            "advantage": -1.0,
            "extra": {"environment": "calc"},
        },
        {
            "step": 3,
            "prompt": prompt,
            "completion": good,
            "rewards": {"answer": 1.0, "tool_success": 1.0},
            "advantage": 1.0,
            "extra": {"environment": "calc"},
        },
        {
            "step": 3,
            "prompt": prompt,
            "completion": [{"role": "assistant", "content": "<call>calculator(1"}],
            "rewards": {"answer": 0.0, "tool_success": None},
            "advantage": 0.0,
            "extra": {"environment": "game"},
        },
    ]


def test_trajectory_shows_turns_calls_results_failures_and_scores() -> None:
    t = trajectories.trajectory(rows()[0], {"answer": 1.0, "tool_success": 0.5})
    assert [turn["role"] for turn in t["turns"]] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert t["turns"][1]["calls"][0]["name"] == "calculator" and t["turns"][2]["error"] == "division by zero"
    assert t["turns"][3]["calls"][0]["repeated_failure"] and t["final_answer"] == "9"
    assert (t["n_turns"], t["n_tool_calls"], t["n_failed"], t["total"]) == (3, 2, 2, 0.0)
    md = trajectories.markdown(t)
    assert "❌ **tool failed:** `division by zero`" in md and "repeats a failed call" in md
    assert trajectories.trajectory(rows()[2])["malformed"] == 1


def test_filter_and_sort() -> None:
    got = trajectories.trajectories(rows(), {"answer": 1.0, "tool_success": 0.5}, sort_by="total reward")
    assert [t["index"] for t in got] == [1, 0, 2]
    assert [t["index"] for t in trajectories.trajectories(rows(), sort_by="tool calls")] == [0, 1, 2]
    assert [t["index"] for t in trajectories.trajectories(rows(), filters={"environment": "game"})] == [2]
    assert trajectories.filter_values(rows()) == {"environment": ["calc", "game"]}
    assert list(trajectories.summary_frame(got).columns)[:4] == ["#", "environment", "turns", "tool calls"]


def test_agent_metrics_get_their_own_panels() -> None:
    keys = [
        ("train", k)
        for k in (
            "tools/call_frequency",
            "tools/failure_frequency",
            "agent/tool_calls/calculator",
            "agent/turns/mean",
            "tasks/environment/calc/reward_mean",
            "tasks/environment/calc/reward_std",
            "my_log_metric",
            "sample/staleness",
            "batch/tokens",
            "perf/step_s",
            "num_tokens",
            "reward",
        )
    ]
    groups = charts.group_metrics(keys)
    assert groups["tools"] == ["tools/call_frequency", "tools/failure_frequency"]
    assert groups["tool_calls"] == ["agent/tool_calls/calculator", "agent/turns/mean"]
    assert groups["tasks"] == ["tasks/environment/calc/reward_mean"]
    assert groups["log_metric"] == ["my_log_metric"]
    assert groups["async"] == ["batch/tokens", "perf/step_s", "sample/staleness"]
    assert groups["other"] == ["num_tokens"]
