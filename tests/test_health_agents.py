"""The agent health rules on constructed metric logs (the failing-tool and stopped-calling cases run for real in
test_agents_training.py): each fires on its pattern, with the shape of every finding, and none without tools."""

from __future__ import annotations

from grpo_dashboard.health import diagnose


def logs(n: int = 20, **series: object) -> list[dict]:
    out = []
    for i in range(n):
        rec = {"step": i + 1, "reward": 0.5 + 0.01 * i, "tools/call_frequency": 1.0, "tools/failure_frequency": 0.0}
        for key, f in series.items():
            rec[key] = f(i) if callable(f) else f
        out.append(rec)
    return out


def rules(records: list[dict], config: dict | None = None) -> dict:
    return {f.rule: f for f in diagnose(records, config)}


def test_turn_limit_and_malformed_calls() -> None:
    found = rules(
        logs(**{"agent/turn_limit_ratio": 0.8, "agent/malformed_ratio": lambda i: 0.4 if i > 10 else 0.0}),
        {"max_tool_calling_iterations": 4},
    )
    assert found["turn_limit"].severity == "warning" and "(now 4)" in found["turn_limit"].message
    assert found["malformed_tool_calls"].step >= 12
    assert found["turn_limit"].remedy and found["turn_limit"].metric == "agent/turn_limit_ratio"


def test_rising_tool_failures_warn() -> None:
    found = rules(logs(30, **{"tools/failure_frequency": lambda i: 0.01 * i}))
    assert found["tool_failures"].severity == "warning" and "rising" in found["tool_failures"].message


def test_failures_whose_results_trl_dropped_are_named_with_their_fix() -> None:
    dropped = logs(**{"tools/failure_frequency": 0.8, "agent/dropped_result_ratio": 0.6})
    f = rules(dropped)["tool_failures"]
    assert f.severity == "error" and "TRL dropped the results of 60% of those calls" in f.message
    assert f.remedy.endswith("raise max_completion_length or keep tool results and error texts short")
    kept = rules(logs(**{"tools/failure_frequency": 0.8, "agent/dropped_result_ratio": 0.02}))["tool_failures"]
    assert "dropped" not in kept.message and "max_completion_length" not in kept.remedy


def test_one_task_regressing_or_flat_while_others_improve() -> None:
    found = rules(
        logs(
            **{
                "tasks/environment/calc/reward_mean": lambda i: 0.1 + 0.04 * i,
                "tasks/environment/game/reward_mean": lambda i: 0.9 - 0.03 * i,
                "tasks/environment/calc/reward_std": 0.3,
                "tasks/environment/game/reward_std": 0.2,
            }
        )
    )
    assert "game regresses" in found["task_regression"].message
    flat = rules(
        logs(
            **{
                "tasks/task/a/reward_mean": lambda i: 0.04 * i,
                "tasks/task/b/reward_mean": 0.5,
                "tasks/task/a/reward_std": 0.3,
                "tasks/task/b/reward_std": 0.0,
            }
        )
    )
    assert "lost all reward variance" in flat["task_regression"].message


def test_async_staleness_and_empty_queue() -> None:
    # AsyncGRPOTrainer's own names (trl/experimental/async_grpo): sample/*, perf/*
    found = [
        f
        for f in diagnose(
            logs(
                **{
                    "sample/staleness_mean": 3.5,
                    "sample/dropped_stale_total": lambda i: 2 * i,
                    "sample/rollout_queue_size": lambda i: 0 if i > 5 else 3,
                    "perf/rollout_wait_s": 0.8,
                    "perf/step_s": 1.0,
                }
            ),
            {"max_staleness": 4},
        )
        if f.rule == "async_staleness"
    ]
    assert {f.metric for f in found} == {
        "sample/dropped_stale_total",
        "sample/staleness_mean",
        "sample/rollout_queue_size",
    }
    assert any("waiting 80% of each step" in f.message for f in found)


def test_no_agent_rule_fires_without_tools() -> None:
    plain = [{"step": i + 1, "reward": 0.5, "reward_std": 0.2, "loss": 0.0, "entropy": 3.0} for i in range(30)]
    agent_rules = {
        "tool_failures",
        "tool_use_collapse",
        "turn_limit",
        "malformed_tool_calls",
        "task_regression",
        "async_staleness",
    }
    assert not agent_rules & set(rules(plain))
    assert not agent_rules & set(rules(logs()))  # tools used, all healthy


def test_task_regression_with_two_task_columns() -> None:
    """examples/agent_mixed.yaml logged with two task columns (`task` and `environment` name the same split): the game
    task falls 1.12 -> 0.40 while calc rises. Each column is judged on its own, so the other column's view of the
    same rows no longer hides the regression; with one column it fires as before."""
    game = lambda i: 1.12 - 0.04 * i  # noqa: E731
    calc = lambda i: 0.30 + 0.03 * i  # noqa: E731
    columns = {}
    for col in ("task", "environment"):
        columns[f"tasks/{col}/game/reward_mean"] = game
        columns[f"tasks/{col}/calc/reward_mean"] = calc
    found = [f for f in diagnose(logs(20, **columns)) if f.rule == "task_regression"]
    assert {f.metric for f in found} == {"tasks/task/game/reward_mean", "tasks/environment/game/reward_mean"}
    one = {k: v for k, v in columns.items() if "/task/" in k}
    assert [f.metric for f in diagnose(logs(20, **one)) if f.rule == "task_regression"] == [
        "tasks/task/game/reward_mean"
    ]


def test_sparse_agent_logs_say_how_much_evidence_they_have() -> None:
    """Tool metrics on 2 of 20 records: the failure share is reported with its evidence, and as a warning at most
    (too few logs for a sustained state), not an error "from the last 1 logs"."""
    records = logs(20)
    for i, rec in enumerate(records):
        if i not in (17, 19):
            del rec["tools/failure_frequency"], rec["tools/call_frequency"]
        else:
            rec["tools/failure_frequency"] = 0.9
    f = rules(records)["tool_failures"]
    assert f.severity == "warning"
    assert "Evidence: 2 of the 2 logs that carry tools/failure_frequency (20 records in all)" in f.message
    assert "a first reading" in f.message
