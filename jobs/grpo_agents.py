"""Agents for GRPO jobs: tools, environments, process rewards and the warmed tiny tool-calling model.

Ships beside `grpo_job.py` and imports nothing from `grpo_dashboard` (light at import: torch, trl and transformers
load inside the functions). What both sides use is defined here once: the built-in tools and environments
(`BUILTIN_TOOLS`, `BUILTIN_ENVIRONMENTS`), the process rewards (registered into `grpo_rewards.REWARDS`), how a tool
result reads as a failure (`is_failure`, TRL's `{"error": ...}` result) and the per-turn reading of a trajectory
(`tool_turns`), which the dashboard's trajectory view calls.

The spec's `agent:` section (run.yaml, TRL's names): `tools` (built-in names or `file.py:function` /
`package.module:function`), `environment_factory` (a built-in name, `file.py:Class` or an OpenEnv server
`openenv:URL` / `openenv:module:app` (grpo_openenv.py), or a mapping name -> one of those selected per row by an
`environment` column), `max_tool_calling_iterations`, `chat_template_kwargs`,
`rollout_func` (`file.py:function`), `log_columns` (dataset columns recorded with every sample, e.g. a task column),
`trainer` (`grpo` or `async_grpo`), `async_config` (AsyncGRPOConfig fields) and `tiny_warmup` (the warmed tiny model
of `grpo_agent_model.py`).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import operator
import os
import random
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grpo_openenv
import grpo_rollout
import grpo_tool_calls
from grpo_tool_calls import failure_text, is_failure, malformed_calls, tool_turns

__all__ = ["failure_text", "is_failure", "malformed_calls", "tool_turns"]  # the reading the dashboard calls here

TRAINERS = ("grpo", "async_grpo")


# ---------------------------------------------------------------- built-in tools

_OPS: dict[type, Callable[..., Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def _arith(node: ast.AST) -> float | int:
    if isinstance(node, ast.Expression):
        return _arith(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _arith(node.left), _arith(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise ValueError("exponent too large")
        return _OPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_arith(node.operand))
    raise ValueError(f"unsupported expression element {type(node).__name__}")


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression and return the result.

    Args:
        expression: The arithmetic expression to evaluate, e.g. 37+48 or (3*4)-5.

    Returns:
        The value of the expression as text.
    """
    value = _arith(ast.parse(str(expression).strip(), mode="eval"))
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


BUILTIN_TOOLS: dict[str, Callable[..., Any]] = {"calculator": calculator}


# ---------------------------------------------------------------- built-in environments


class GuessNumberEnv:
    """A number guessing game with state across turns: the model calls `guess` until it hits the secret number.

    `reset(**row)` takes the secret from a `secret` column when the row has one, else draws it (1..`high`).
    `get_reward()`: 1.0 for a solved game minus 0.1 per extra guess, 0.0 when unsolved.
    """

    high = 8

    def __init__(self) -> None:
        self.secret = 0
        self.guesses: list[int] = []
        self.solved = False
        self._rng = random.Random(int(os.environ.get("GRPO_AGENT_SEED", "0")))

    def reset(self, **kwargs: Any) -> str:
        """Start a new game and return its instructions (appended to the prompt)."""
        secret = kwargs.get("secret")
        self.secret = int(secret) if secret not in (None, "") else self._rng.randint(1, self.high)
        self.guesses, self.solved = [], False
        return f"guess1-{self.high}"

    def guess(self, number: int) -> str:
        """Guess the secret number.

        Args:
            number: The guessed number, from 1 to 8.

        Returns:
            higher, lower or correct.
        """
        n = int(number)
        self.guesses.append(n)
        if n == self.secret:
            self.solved = True
            return "correct"
        return "higher" if n < self.secret else "lower"

    def get_reward(self) -> float:
        """1.0 when the game was solved, minus 0.1 per extra guess; 0.0 otherwise."""
        return max(0.0, 1.0 - 0.1 * (len(self.guesses) - 1)) if self.solved else 0.0


class CalculatorEnv:
    """The calculator as an environment (for runs mixing environments by an `environment` column): the row's prompt
    is the problem (`reset` adds nothing); its one tool is `calculator`. It owns no reward (use e.g. numeric_match)."""

    def reset(self, **kwargs: Any) -> None:
        """Nothing to set up: the dataset row's prompt is the problem."""
        return None

    def calculator(self, expression: str) -> str:
        """Evaluate an arithmetic expression and return the result.

        Args:
            expression: The arithmetic expression to evaluate, e.g. 37+48 or (3*4)-5.

        Returns:
            The value of the expression as text.
        """
        return calculator(expression)


BUILTIN_ENVIRONMENTS: dict[str, type] = {"guess_number": GuessNumberEnv, "calculator": CalculatorEnv}


def _total(rewards: Mapping[str, Any], weights: Mapping[str, float], i: int) -> float | None:
    parts = []
    for name, values in rewards.items():
        v = values[i] if i < len(values) else None
        if isinstance(v, (int, float)) and v == v:
            parts.append(weights.get(name, 1.0) * float(v))
    return sum(parts) if parts else None


def sample_outcomes(value: Any) -> list[Any] | None:
    """A sample's recorded outcomes of its result-less calls (the JSON text TRL's `log_extra` carried), or None."""
    if isinstance(value, list):
        return value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return None
        return parsed if isinstance(parsed, list) else None
    return None


def episode_metrics(trainer: Any) -> dict[str, float]:
    """Agent metrics of the last generation batch (TRL's `_logs`), logged beside TRL's own at each log step.

    `agent/turns/mean` (assistant turns per episode), `agent/tool_calls/<name>` (calls per episode),
    `agent/turn_limit_ratio` (episodes that used all max_tool_calling_iterations rounds),
    `agent/malformed_ratio` (episodes with an unparsed tool call), `agent/repeated_failure_ratio`,
    `agent/dropped_result_ratio` (calls TRL ran whose results it dropped for exceeding max_completion_length: they
    count in its tools/* metrics, and the trajectories show them; only where the job notes outcomes), and for every
    column recorded with the samples (environment, log_columns) `tasks/<column>/<value>/reward_mean` and
    `.../reward_std` (total weighted reward). Empty for runs without tools.
    """
    logs = getattr(trainer, "_logs", None)
    if not getattr(trainer, "tools", None) or not isinstance(logs, dict) or not logs.get("completion"):
        return {}
    completions = list(logs["completion"])
    n = len(completions)
    limit = getattr(trainer, "max_tool_calling_iterations", None)
    out: dict[str, float] = {}
    turns, limited, malformed, repeated, ran, dropped = 0, 0, 0, 0, 0, 0
    per_tool: dict[str, int] = {}
    extra = dict(logs.get("extra") or {})
    recorded = extra.pop(grpo_tool_calls.OUTCOMES_COLUMN, None)
    outcomes = list(recorded)[:n] if recorded is not None else []
    for i, c in enumerate(completions):
        calls = [
            t
            for t in tool_turns(c, sample_outcomes(outcomes[i] if i < len(outcomes) else None))
            if t["outcome"] != "not_run"
        ]
        msgs = c if isinstance(c, list) else []
        turns += sum(1 for m in msgs if isinstance(m, dict) and m.get("role") == "assistant")
        roles = [m.get("role") if isinstance(m, dict) else None for m in msgs]
        # a round: an assistant turn with tool calls answered by a tool message
        rounds = sum(
            1
            for i, m in enumerate(msgs)
            if roles[i] == "assistant" and m.get("tool_calls") and i + 1 < len(msgs) and roles[i + 1] == "tool"
        )
        limited += int(isinstance(limit, int) and limit < sys.maxsize and rounds >= limit)
        malformed += int(malformed_calls(c) > 0)
        repeated += int(any(t["repeated_failure"] for t in calls))
        ran += len(calls)
        dropped += sum(t["outcome"] == "dropped" for t in calls)
        for t in calls:
            per_tool[t["name"]] = per_tool.get(t["name"], 0) + 1
    out["agent/turns/mean"] = turns / n
    out["agent/turn_limit_ratio"] = limited / n
    out["agent/malformed_ratio"] = malformed / n
    out["agent/repeated_failure_ratio"] = repeated / n
    if recorded is not None:
        out["agent/dropped_result_ratio"] = dropped / ran if ran else 0.0
    for name, count in sorted(per_tool.items()):
        out[f"agent/tool_calls/{name}"] = count / n
    names = list(getattr(trainer, "reward_func_names", None) or [])
    w = getattr(trainer, "reward_weights", None)
    weights = dict(zip(names, w.tolist() if hasattr(w, "tolist") else list(w or []), strict=False))
    rewards = logs.get("rewards") or {}
    for column, values in extra.items():
        groups: dict[str, list[float]] = {}
        for i, v in enumerate(list(values)[:n]):
            total = _total(rewards, weights, i)
            if total is not None and v is not None:
                groups.setdefault(str(v), []).append(total)
        for value, totals in sorted(groups.items()):
            mean = sum(totals) / len(totals)
            out[f"tasks/{column}/{value}/reward_mean"] = mean
            out[f"tasks/{column}/{value}/reward_std"] = (sum((t - mean) ** 2 for t in totals) / len(totals)) ** 0.5
    return out


# ---------------------------------------------------------------- process rewards


def _tool_success(no_calls: float | None = None) -> Callable[..., list[float | None]]:
    def tool_success(completions: list[Any], **kwargs: Any) -> list[float | None]:
        out: list[float | None] = []
        for c in completions:
            calls = [t for t in tool_turns(c) if t["result"] is not None]
            out.append(sum(not t["failed"] for t in calls) / len(calls) if calls else no_calls)
        return out

    return tool_success


def _repeated_failure(penalty: float = -0.5) -> Callable[..., list[float | None]]:
    if not isinstance(penalty, (int, float)) or penalty > 0:
        raise ValueError(
            f"repeated_failure_penalty: params.penalty = {penalty!r} is invalid; it must be a number ≤ 0."
        )

    def repeated_failure_penalty(completions: list[Any], **kwargs: Any) -> list[float | None]:
        return [float(penalty) * sum(t["repeated_failure"] for t in tool_turns(c)) for c in completions]

    return repeated_failure_penalty


def process_rewards(define: Callable[..., Any]) -> list[Any]:
    """The process rewards as `grpo_rewards.RewardDef`s (`define` is grpo_rewards' own constructor)."""
    return [
        define(
            "tool_success",
            _tool_success,
            "other",
            "Process reward: the share of the trajectory's tool calls "
            "that succeeded (a raised exception is TRL's {'error': ...} result); `no_calls` without tool calls.",
            {"no_calls": (None, "value for a trajectory without tool calls (null: cannot judge)")},
        ),
        define(
            "repeated_failure_penalty",
            _repeated_failure,
            "other",
            "Process reward: `penalty` for every tool "
            "call that repeats (same name and arguments) a call that already failed in the trajectory; 0 "
            "otherwise.",
            {"penalty": (-0.5, "added per repeated failing call (≤ 0)")},
        ),
    ]


# ---------------------------------------------------------------- loading the agent spec


def _import_target(target: str, base_dir: str | Path | None, what: str) -> Any:
    """`file.py:name` or `package.module:name` -> the object (executes the user's module: job or sandbox only)."""
    if ":" in target:
        where, attr = target.rsplit(":", 1)
    else:
        where, _, attr = target.rpartition(".")
    if not where or not attr:
        raise ValueError(f"{what} {target!r} must look like 'file.py:name' or 'package.module:name'.")
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_absolute() and base_dir:
            path = Path(base_dir) / path
        if not path.is_file():
            raise FileNotFoundError(f"{what} file {str(path)!r} (from {target!r}) does not exist.")
        # A stable module name keeps classes and functions picklable by reference (async GRPO's rollout process).
        mod_name = f"grpo_agent_code_{path.stem}"
        if mod_name not in sys.modules or getattr(sys.modules[mod_name], "__file__", None) != str(path):
            spec = importlib.util.spec_from_file_location(mod_name, path)
            if spec is None or spec.loader is None:
                raise ImportError(f"Cannot import {what} file {str(path)!r}.")
            module = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = module
            spec.loader.exec_module(module)
        module = sys.modules[mod_name]
    else:
        module = importlib.import_module(where)
    obj = getattr(module, attr, None)
    if obj is None:
        raise AttributeError(f"{what} {target!r}: {attr!r} is not defined in {where!r}.")
    return obj


def load_tool(name: str, base_dir: str | Path | None = None) -> Callable[..., Any]:
    """A built-in tool by name, or the user's `file.py:function`."""
    if name in BUILTIN_TOOLS:
        return BUILTIN_TOOLS[name]
    fn = _import_target(name, base_dir, "tool")
    if not callable(fn):
        raise TypeError(f"tool {name!r} is not callable.")
    return fn


def load_environment(name: str, base_dir: str | Path | None = None) -> Callable[[], Any]:
    """A built-in environment class by name, or the user's `file.py:Class` (any zero-argument factory)."""
    if name in BUILTIN_ENVIRONMENTS:
        return BUILTIN_ENVIRONMENTS[name]
    factory = _import_target(name, base_dir, "environment_factory")
    if not callable(factory):
        raise TypeError(f"environment_factory {name!r} is not callable.")
    return factory


def environment_factory(agent: Mapping[str, Any], base_dir: str | Path | None = None) -> Any:
    """TRL's `environment_factory` for the spec: None, one factory, or a mapping name -> factory."""
    env = agent.get("environment_factory")
    if not env:
        return None

    def load(target: str, name: str = "") -> Callable[[], Any]:  # `openenv:` targets: jobs/grpo_openenv.py
        return (
            grpo_openenv.factory(target, name)
            if grpo_openenv.is_target(target)
            else load_environment(target, base_dir)
        )

    if isinstance(env, Mapping):
        return {str(k): load(str(v), str(k)) for k, v in env.items()}
    return load(str(env))


def records_outcomes(agent: Mapping[str, Any] | None) -> bool:
    """Whether the job notes every tool call's outcome (jobs/grpo_tool_calls.py): TRL's own tool loop runs the
    tools (GRPOTrainer with tools or an environment). Async GRPO runs them in its rollout worker's process."""
    return bool(
        agent and (agent.get("tools") or agent.get("environment_factory")) and agent.get("trainer") != "async_grpo"
    )


def trainer_kwargs(agent: Mapping[str, Any] | None, base_dir: str | Path | None = None) -> dict[str, Any]:
    """`tools`, `environment_factory` and `rollout_func` for the trainer (only those the spec sets)."""
    if not agent:
        return {}
    out: dict[str, Any] = {}
    record = records_outcomes(agent)
    tools = [load_tool(str(t), base_dir) for t in agent.get("tools") or []]
    if tools:
        out["tools"] = [grpo_tool_calls.recording(t) for t in tools] if record else tools
    env = environment_factory(agent, base_dir)
    if env is not None:
        out["environment_factory"] = grpo_tool_calls.recording_factory(env) if record else env
    if agent.get("rollout_func"):  # its first output is checked against TRL's contract (jobs/grpo_rollout.py)
        target = str(agent["rollout_func"])
        out["rollout_func"] = grpo_rollout.CheckedRollout(_import_target(target, base_dir, "rollout_func"), target)
    return out


def config_kwargs(agent: Mapping[str, Any] | None) -> dict[str, Any]:
    """GRPOConfig fields the agent section sets (`max_tool_calling_iterations`, `chat_template_kwargs`)."""
    if not agent:
        return {}
    out: dict[str, Any] = {}
    if agent.get("max_tool_calling_iterations") is not None:
        out["max_tool_calling_iterations"] = int(agent["max_tool_calling_iterations"])
    if agent.get("chat_template_kwargs"):
        out["chat_template_kwargs"] = dict(agent["chat_template_kwargs"])
    if agent.get("trainer") == "async_grpo":
        out.update(dict(agent.get("async_config") or {}))
    return out


def datasetless(agent: Mapping[str, Any] | None, ds_spec: Mapping[str, Any]) -> bool:
    """True when an environment owns the prompts: no dataset source is given (TRL then needs max_steps)."""
    return bool(agent and agent.get("environment_factory")) and not (ds_spec.get("path") or ds_spec.get("data_files"))


def tag_rewards(funcs: list[Any], agent: Mapping[str, Any] | None, columns: list[str]) -> list[Any]:
    """Wrap one reward so samples record the environment column, the spec's `log_columns` and (when the job notes
    tool calls) the outcomes of calls without result. The first synchronous function is wrapped when there is one:
    TRL runs those first, in order, and awaits the async ones after."""
    wanted = [
        c
        for c in (
            [
                *(["environment"] if agent and isinstance(agent.get("environment_factory"), Mapping) else []),
                *(agent or {}).get("log_columns", []),
            ]
        )
        if c in columns
    ]
    outcomes = records_outcomes(agent)
    candidates = [i for i, f in enumerate(funcs) if callable(f)]  # a reward model (a str) records nothing
    if not candidates or not (wanted or outcomes):
        return funcs
    first = next((i for i in candidates if not grpo_tool_calls.is_async(funcs[i])), candidates[0])
    tagged = grpo_tool_calls.tagger(funcs[first], list(dict.fromkeys(wanted)), outcomes)
    return [*funcs[:first], tagged, *funcs[first + 1 :]]


def grpo_only(agent: Mapping[str, Any] | None, **kwargs: Any) -> dict[str, Any]:
    """`kwargs` for GRPOConfig/GRPOTrainer; {} for async GRPO, whose config and trainer lack them (reward_weights,
    eval_dataset)."""
    return {} if agent and agent.get("trainer") == "async_grpo" else kwargs


def async_hooks(agent: Mapping[str, Any] | None, base_dir: str | Path | None, **context: Any) -> dict[str, Any]:
    """AsyncGRPOTrainer's `rollout_worker=` / `weight_transfer=`, each built by the spec's factory with `context`."""
    if not agent or agent.get("trainer") != "async_grpo":
        return {}
    keys = ("rollout_worker", "weight_transfer")
    return {k: _import_target(str(agent[k]), base_dir, f"agent.{k}")(**context) for k in keys if agent.get(k)}


def trainer_classes(agent: Mapping[str, Any] | None) -> tuple[Any, Any]:
    """(config class, trainer class): GRPOConfig/GRPOTrainer, or TRL's experimental AsyncGRPOConfig/Trainer."""
    if agent and agent.get("trainer") == "async_grpo":
        from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer

        return AsyncGRPOConfig, AsyncGRPOTrainer
    from trl import GRPOConfig, GRPOTrainer

    return GRPOConfig, GRPOTrainer
