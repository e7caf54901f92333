"""Tool calls of a trajectory, as TRL ran them: the per-turn reading (`tool_turns`) and the job-side record of every
call's outcome, so the trajectories count the calls and failures that TRL's `tools/*` metrics count.

TRL counts a call (and a failure, when the tool raises) as it runs the tool, then drops the results that would
push the completion past `max_completion_length`: the calling assistant turn stays, its tool messages go. Read
from the completion alone, such a call has no result and cannot be told from one TRL never ran (the tool loop
stopped at `max_tool_calling_iterations`). So the job wraps each tool and each environment's tool methods
(`recording`, `recording_factory`; same name, docstring and signature, hence the same schema TRL renders) to note
each call's outcome in a per-process `Ledger`; the first reward function (`OutcomeTagger`, called once per
generation batch after the tool loop) matches the noted calls against the completions and records, per sample,
what became of each call that has no result (`OUTCOMES_COLUMN`, a `log_extra` column TRL gathers across ranks).

Light at import (stdlib only); the dashboard's trajectory view reads trajectories through `tool_turns` too.
"""

from __future__ import annotations

import ast
import functools
import inspect
import json
import threading
from collections.abc import Callable
from typing import Any

# The `log_extra` column holding each sample's outcomes of result-less calls (the samples file moves it out of
# `extra` into `tool_outcomes`, so it is neither a task column nor a trajectory filter).
OUTCOMES_COLUMN = "_dashboard_tool_outcomes"
ERROR_CHARS = 300  # an exception text kept in an outcome, at most
# Text a tool call leaves behind when the tokenizer could not parse it (TRL then keeps the turn as plain text).
CALL_MARKERS = ("<call>", "<tool_call>", "<|python_tag|>", "<function=", "<|tool_call|>")


def is_failure(content: Any) -> bool:
    """True when a tool message's content is TRL's failure result (`str({"error": ...})`)."""
    return isinstance(content, str) and content.startswith("{'error':")


def failure_text(content: Any) -> str:
    """The exception text of a failed tool result (the content itself when it is not TRL's error dict)."""
    if is_failure(content):
        try:
            return str(ast.literal_eval(content).get("error", content))
        except (ValueError, SyntaxError):
            return str(content)
    return str(content)


def args_key(arguments: Any) -> str:
    """A call's arguments as one comparable string (keys sorted)."""
    try:
        return json.dumps(arguments, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(arguments)


def tool_turns(completion: Any, outcomes: list[Any] | None = None) -> list[dict[str, Any]]:
    """One entry per tool call of a conversational completion: name, arguments, result, failed, repeated_failure,
    outcome and error.

    A call's result is the tool message that follows it (in order). `repeated_failure`: the same name and arguments
    already failed earlier in this trajectory. `outcome`: `returned` (its result is in the trajectory), and for a
    call without result, from `outcomes` (the sample's recorded outcomes of its result-less calls, in order):
    `dropped` (TRL ran it, then dropped its result for exceeding max_completion_length; `failed`, `error` and
    `result_chars` say how it ended) or `not_run` (the tool loop had ended); `no_result` when nothing was recorded.
    """
    if not isinstance(completion, list):
        return []
    calls: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    for message in completion:
        if not isinstance(message, dict):
            continue
        if message.get("role") == "assistant":
            for tc in message.get("tool_calls") or []:
                fn = tc.get("function", tc) if isinstance(tc, dict) else {}
                call = {
                    "name": str(fn.get("name", "?")),
                    "arguments": fn.get("arguments") or {},
                    "result": None,
                    "failed": False,
                    "repeated_failure": False,
                    "outcome": "no_result",
                    "error": None,
                }
                calls.append(call)
                pending.append(call)
        elif message.get("role") == "tool" and pending:
            call = pending.pop(0)
            content = message.get("content")
            call["result"] = content if isinstance(content, str) else json.dumps(content, default=str)
            call["failed"] = is_failure(call["result"])
            call["error"] = failure_text(call["result"]) if call["failed"] else None
            call["outcome"] = "returned"
    recorded = [o for o in outcomes or [] if isinstance(o, dict)]
    for call, outcome in zip((c for c in calls if c["result"] is None), recorded, strict=False):
        if "executed" not in outcome:
            continue
        if outcome["executed"]:
            call["outcome"] = "dropped"
            call["failed"] = bool(outcome.get("failed"))
            call["error"] = outcome.get("error")
            call["result_chars"] = outcome.get("chars")
        else:
            call["outcome"] = "not_run"
    failed: set[tuple[str, str]] = set()
    for call in calls:
        key = (call["name"], args_key(call["arguments"]))
        call["repeated_failure"] = call["failed"] and key in failed
        if call["failed"]:
            failed.add(key)
    return calls


def malformed_calls(completion: Any) -> int:
    """Assistant turns whose text still holds a tool-call marker: a call the tokenizer could not parse."""
    if isinstance(completion, str):
        return int(any(m in completion for m in CALL_MARKERS))
    if not isinstance(completion, list):
        return 0
    return sum(
        1
        for m in completion
        if isinstance(m, dict)
        and m.get("role") == "assistant"
        and any(marker in str(m.get("content") or "") for marker in CALL_MARKERS)
    )


class Ledger:
    """The calls this process ran since the last generation batch was scored: name, arguments, how each ended."""

    def __init__(self) -> None:
        self._entries: list[dict[str, Any]] = []
        self._lock = threading.Lock()  # async tools run on TRL's event-loop thread
        self.names: set[str] = set()  # the tools whose calls are noted (a call to another has an unknown outcome)

    def add(self, name: str, arguments: dict[str, Any], error: BaseException | None, result: Any = None) -> None:
        """Note one call: its error when it raised, else its result (only the result's length is kept)."""
        text = str({"error": str(error)}) if error is not None else str(result)
        entry = {
            "name": name,
            "key": args_key(arguments),
            "failed": error is not None,
            "error": str(error)[:ERROR_CHARS] if error is not None else None,
            "chars": len(text),
        }
        with self._lock:
            self._entries.append(entry)

    def take(self) -> list[dict[str, Any]]:
        """The noted calls, removed (the next batch starts empty)."""
        with self._lock:
            out, self._entries = self._entries, []
        return out


LEDGER = Ledger()


def recording(tool: Callable[..., Any]) -> Callable[..., Any]:
    """`tool` noting each call's outcome in the `LEDGER`; name, docstring and signature are `tool`'s (TRL's schema
    reads them), async stays async, and the exception still reaches TRL (its `{"error": ...}` result)."""
    name = getattr(tool, "__name__", "tool")
    LEDGER.names.add(name)
    if inspect.iscoroutinefunction(tool):

        @functools.wraps(tool)
        async def recorded_async(*args: Any, **kwargs: Any) -> Any:
            try:
                result = await tool(*args, **kwargs)
            except Exception as e:
                LEDGER.add(name, kwargs, e)
                raise
            LEDGER.add(name, kwargs, None, result)
            return result

        return recorded_async

    @functools.wraps(tool)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        try:
            result = tool(*args, **kwargs)
        except Exception as e:
            LEDGER.add(name, kwargs, e)
            raise
        LEDGER.add(name, kwargs, None, result)
        return result

    return recorded


def tool_methods(instance: Any) -> list[str]:
    """The names of an environment's tool methods, as TRL picks them: public functions of its class, less `reset`
    and `get_reward`."""
    return [
        n
        for n, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction)
        if n not in ("reset", "get_reward") and not n.startswith("_")
    ]


class RecordingFactory:
    """An `environment_factory` whose instances note their tool calls: each tool method is replaced, on the
    instance, by its `recording` (TRL lists the methods on the class and fetches them from the instance). An
    instance that refuses new attributes (`__slots__`) keeps its own methods and goes unrecorded."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self.factory = factory
        self.__name__ = getattr(factory, "__name__", "environment_factory")

    def __call__(self) -> Any:
        instance = self.factory()
        for name in tool_methods(instance):
            method = getattr(instance, name)
            try:
                setattr(instance, name, method)
            except (AttributeError, TypeError):
                break
            setattr(instance, name, recording(method))
        return instance


def recording_factory(factory: Any) -> Any:
    """`factory` (one callable, or a mapping name -> callable) with recording instances."""
    if isinstance(factory, dict):
        return {k: RecordingFactory(v) for k, v in factory.items()}
    return RecordingFactory(factory)


def _take(pool: list[dict[str, Any]], call: dict[str, Any], failed: bool | None = None) -> dict[str, Any] | None:
    key = args_key(call["arguments"])
    matches = [i for i, e in enumerate(pool) if e["name"] == call["name"] and e["key"] == key]
    if not matches:
        return None
    preferred = [i for i in matches if failed is None or pool[i]["failed"] == failed]
    return pool.pop((preferred or matches)[0])


def outcomes(completions: list[Any], entries: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Per completion, the outcome of each of its result-less calls (in order): `{"executed": True, "failed",
    "error", "chars"}` for a call the ledger noted beyond those whose results the completions hold (TRL ran it and
    dropped its result), `{"executed": False}` for another call to a noted tool, `{}` (unknown) for a call to a tool
    whose calls are not noted. Calls are matched by name and arguments."""
    pool = list(entries)
    turns = [tool_turns(c) for c in completions]
    for calls in turns:
        for call in calls:
            if call["result"] is not None:
                _take(pool, call, call["failed"])
    out: list[list[dict[str, Any]]] = []
    for calls in turns:
        row: list[dict[str, Any]] = []
        for call in calls:
            if call["result"] is None:
                entry = _take(pool, call)
                if entry is not None:
                    row.append(
                        {"executed": True, "failed": entry["failed"], "error": entry["error"], "chars": entry["chars"]}
                    )
                else:
                    row.append({"executed": False} if call["name"] in LEDGER.names else {})
        out.append(row)
    return out


def is_async(func: Any) -> bool:
    """Whether calling `func` gives a coroutine (a coroutine function, or an object whose `__call__` is one)."""
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(type(func).__call__)


class SampleTagger:
    """Wraps one reward function so each sample records `columns` (dataset columns such as environment or task)
    and, with `outcomes`, the outcomes of its result-less calls (`OUTCOMES_COLUMN`, from the ledger, which it
    empties: TRL scores a batch once, after its tool loop), both via TRL's `log_extra`. A top-level class so it
    pickles (async GRPO)."""

    def __init__(self, func: Callable[..., Any], columns: list[str], outcomes: bool = False) -> None:
        self.func, self.columns, self.outcomes = func, list(columns), outcomes
        self.__name__ = getattr(func, "__name__", "reward")

    def _tag(self, kwargs: dict[str, Any]) -> None:
        log_extra = kwargs.get("log_extra")
        entries = LEDGER.take() if self.outcomes else []
        if not callable(log_extra):
            return
        completions = kwargs.get("completions")
        n = len(completions or [])
        for column in self.columns:
            values = kwargs.get(column)
            if values is not None and len(values) == n:
                log_extra(
                    column, [v if isinstance(v, (str, int, float, bool)) or v is None else str(v) for v in values]
                )
        if self.outcomes and isinstance(completions, list):
            log_extra(OUTCOMES_COLUMN, [json.dumps(r) if r else None for r in outcomes(completions, entries)])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._tag(kwargs)
        return self.func(*args, **kwargs)


class AsyncSampleTagger(SampleTagger):
    """`SampleTagger` of an async reward function (TRL awaits it: it must stay a coroutine function)."""

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._tag(kwargs)
        return await self.func(*args, **kwargs)


def tagger(func: Callable[..., Any], columns: list[str], outcomes: bool = False) -> SampleTagger:
    """The `SampleTagger` (sync or async, as `func` is) of one reward function."""
    return (AsyncSampleTagger if is_async(func) else SampleTagger)(func, columns, outcomes)
