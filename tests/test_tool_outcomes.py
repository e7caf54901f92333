"""The job-side record of tool-call outcomes (jobs/grpo_tool_calls.py): the recording wrappers keep the schema TRL
renders and the exception TRL turns into its error result, calls are matched to the completions TRL kept, and the
reward wrapper stays sync or async as TRL must call it. The real trainer's path is in test_agents_training.py."""

from __future__ import annotations

import asyncio
import json
import pickle
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "jobs"))
import grpo_agents
import grpo_tool_calls as tc

from grpo_dashboard.views import trajectories


def divide(a: int, b: int) -> str:
    """Divide two integers.

    Args:
        a: The numerator.
        b: The denominator.
    """
    return str(a // b)


async def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    if key == "missing":
        raise KeyError(key)
    return key.upper()


class Counter:
    """An environment with one tool method and state."""

    def __init__(self) -> None:
        self.total = 0

    def reset(self, **kwargs: object) -> str:
        self.total = 0
        return "start"

    def add(self, amount: int) -> str:
        """Add to the counter.

        Args:
            amount: How much to add.
        """
        self.total += amount
        return str(self.total)

    def get_reward(self) -> float:
        return float(self.total)


def assistant(*calls: tuple[str, dict]) -> dict:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls],
    }


def tool(content: str) -> dict:
    return {"role": "tool", "name": "divide", "content": content}


@pytest.fixture(autouse=True)
def empty_ledger() -> None:
    tc.LEDGER.take()
    tc.LEDGER.names.clear()


def test_recorded_tools_render_the_schema_trl_renders_and_still_raise() -> None:
    from transformers.utils import get_json_schema

    recorded = tc.recording(divide)
    assert recorded.__name__ == "divide" and get_json_schema(recorded) == get_json_schema(divide)
    assert recorded(a=7, b=2) == "3"
    with pytest.raises(ZeroDivisionError):
        recorded(a=1, b=0)
    alookup = tc.recording(lookup)
    assert asyncio.iscoroutinefunction(alookup) and get_json_schema(alookup) == get_json_schema(lookup)
    assert asyncio.run(alookup(key="a")) == "A"
    with pytest.raises(KeyError):
        asyncio.run(alookup(key="missing"))
    entries = tc.LEDGER.take()
    assert [(e["name"], json.loads(e["key"]), e["failed"]) for e in entries] == [
        ("divide", {"a": 7, "b": 2}, False),
        ("divide", {"a": 1, "b": 0}, True),
        ("lookup", {"key": "a"}, False),
        ("lookup", {"key": "missing"}, True),
    ]
    assert entries[1]["error"] == "integer division or modulo by zero"
    assert entries[1]["chars"] == len(str({"error": "integer division or modulo by zero"}))
    assert tc.LEDGER.take() == []


def test_recording_environments_keep_the_tools_trl_lists_and_their_state() -> None:
    from transformers.utils import get_json_schema

    factory = tc.recording_factory({"count": Counter})["count"]
    env = factory()
    # TRL lists tool methods on the class and fetches them from the instance
    assert tc.tool_methods(env) == ["add"]
    method = env.add
    assert method.__name__ == "add" and get_json_schema(method) == get_json_schema(Counter().add)
    env.reset()
    assert method(amount=2) == "2" and method(amount=3) == "5" and env.get_reward() == 5.0
    assert [json.loads(e["key"]) for e in tc.LEDGER.take()] == [{"amount": 2}, {"amount": 3}]

    class Slotted:
        __slots__ = ()

        def reset(self) -> None:
            return None

        def add(self, amount: int) -> str:
            """Add.

            Args:
                amount: How much.
            """
            return str(amount)

    tc.LEDGER.names.clear()
    plain = tc.RecordingFactory(Slotted)()
    assert plain.add(amount=1) == "1" and tc.LEDGER.take() == []
    assert "add" not in tc.LEDGER.names  # its calls' outcomes stay unknown, not "not run"


def test_calls_without_result_are_told_apart_dropped_or_not_run() -> None:
    tc.LEDGER.names.add("divide")  # its calls are noted (the job wrapped it)
    big = {"a": 9, "b": 1}
    kept = [assistant(("divide", {"a": 4, "b": 2})), tool("2"), assistant(("divide", big))]  # big: dropped
    limit = [assistant(("divide", {"a": 6, "b": 3})), tool("2"), assistant(("divide", {"a": 1, "b": 1}))]
    same = [assistant(("divide", big)), tool("9"), {"role": "assistant", "content": "9"}]  # same call, kept
    for a in ({"a": 4, "b": 2}, big, {"a": 6, "b": 3}, big):
        tc.LEDGER.add("divide", a, None, "9" * 500 if a == big else "2")
    tc.LEDGER.add("divide", {"a": 0, "b": 0}, ZeroDivisionError("boom"))  # ran, in no completion (another rank)
    other = [assistant(("search", {"q": "x"}))]  # a tool whose calls are not noted: unknown
    got = tc.outcomes([kept, limit, same, other], tc.LEDGER.take())
    assert got == [[{"executed": True, "failed": False, "error": None, "chars": 500}], [{"executed": False}], [], [{}]]
    assert [t["outcome"] for t in grpo_agents.tool_turns(other, got[3])] == ["no_result"]
    turns = grpo_agents.tool_turns(kept, got[0])
    assert [t["outcome"] for t in turns] == ["returned", "dropped"] and turns[1]["result_chars"] == 500
    assert [t["outcome"] for t in grpo_agents.tool_turns(limit, got[1])] == ["returned", "not_run"]
    assert [t["outcome"] for t in grpo_agents.tool_turns(limit)] == ["returned", "no_result"]


def test_a_dropped_failure_counts_in_the_trajectory_and_repeats_count_after_it() -> None:
    call = ("divide", {"a": 1, "b": 0})
    completion = [assistant(call), tool("{'error': 'boom'}"), assistant(call)]
    tc.LEDGER.add("divide", call[1], ZeroDivisionError("boom"))
    tc.LEDGER.add("divide", call[1], ZeroDivisionError("boom " + "x" * 400))
    outcome = tc.outcomes([completion], tc.LEDGER.take())[0]
    assert outcome[0]["failed"] and len(outcome[0]["error"]) == tc.ERROR_CHARS
    row = {"step": 1, "completion": completion, "rewards": {}, "tool_outcomes": outcome}
    traj = trajectories.trajectories([row])[0]
    assert (traj["n_tool_calls"], traj["n_failed"], traj["n_dropped"]) == (2, 2, 1)
    second = traj["turns"][-1]["calls"][0]
    assert second["repeated_failure"] and second["outcome"] == "dropped"
    text = trajectories.markdown(traj)
    assert "❌ failed: `boom xxx" in text and "TRL dropped its result" in text
    assert trajectories.summary_frame([traj]).loc[0, "results dropped"] == 1


def test_the_reward_wrapper_records_outcomes_once_per_batch_and_keeps_sync_or_async() -> None:
    from trl.trainer.utils import is_async_callable

    def score(completions: list, **kwargs: object) -> list[float]:
        return [1.0] * len(completions)

    async def ascore(completions: list, **kwargs: object) -> list[float]:
        return [2.0] * len(completions)

    logged: dict[str, list] = {}
    tc.LEDGER.names.add("divide")
    sync = tc.tagger(score, ["task"], outcomes=True)
    assert not is_async_callable(sync) and sync.__name__ == "score"
    completion = [assistant(("divide", {"a": 9, "b": 1}))]
    tc.LEDGER.add("divide", {"a": 9, "b": 1}, None, "9" * 50)
    kwargs = {"completions": [completion, completion], "task": ["t1", "t2"], "log_extra": logged.__setitem__}
    assert sync(**kwargs) == [1.0, 1.0]
    assert logged["task"] == ["t1", "t2"]
    assert [json.loads(v) if v else None for v in logged[tc.OUTCOMES_COLUMN]] == [
        [{"executed": True, "failed": False, "error": None, "chars": 50}],
        [{"executed": False}],
    ]
    assert tc.LEDGER.take() == []
    asynced = tc.tagger(ascore, [], outcomes=True)
    assert is_async_callable(asynced)
    assert asyncio.run(asynced(completions=[completion], log_extra=logged.__setitem__)) == [2.0]
    assert pickle.loads(pickle.dumps(tc.tagger(divide, ["task"], outcomes=True))).func is divide
    # which function is wrapped: the first synchronous one (TRL runs those first); none without tools or columns
    funcs = grpo_agents.tag_rewards(["reward-model", ascore, score], {"tools": ["calculator"]}, [])
    assert funcs[0] == "reward-model" and funcs[1] is ascore and isinstance(funcs[2], tc.SampleTagger)
    assert grpo_agents.tag_rewards([score], {"tools": ["calculator"], "trainer": "async_grpo"}, []) == [score]
    assert grpo_agents.tag_rewards([score], None, []) == [score]


def test_trls_completions_table_reads_rewards_extras_and_outcomes_apart(tmp_path: Path) -> None:
    """A run read from TRL's own `completions/*.parquet` (log_completions): its `log_extra` columns are extras, not
    rewards, and the job's outcomes column reaches the trajectory view."""
    import pandas as pd

    from grpo_dashboard.views import completions

    call = ("divide", {"a": 9, "b": 1})
    completion = [assistant(call), {"role": "assistant", "content": "9"}]
    outcome = json.dumps([{"executed": True, "failed": True, "error": "too big", "chars": 900}])
    table = {  # the columns TRL writes, in its order: step, prompt, completion, rewards, extras, advantage
        "step": [3, 3],
        "prompt": [[{"role": "user", "content": "9/1"}]] * 2,
        "completion": [completion, [{"role": "assistant", "content": "9"}]],
        "answer": [1.0, 0.0],
        "environment": ["calc", "calc"],
        tc.OUTCOMES_COLUMN: [outcome, None],
        "advantage": [0.5, -0.5],
    }
    out = tmp_path / "out"
    (out / "completions").mkdir(parents=True)
    pd.DataFrame(table).to_parquet(out / "completions" / "completions_00003.parquet")
    rows = completions.read_step(tmp_path / "run", 3, out)
    assert [r["rewards"] for r in rows] == [{"answer": 1.0}, {"answer": 0.0}]
    assert [r["extra"] for r in rows] == [{"environment": "calc"}] * 2
    traj = trajectories.trajectories(rows)[0]
    assert (traj["n_tool_calls"], traj["n_failed"], traj["n_dropped"]) == (1, 1, 1)
