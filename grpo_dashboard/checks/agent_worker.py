"""Imports an agent spec's tools, environments and rollout function and checks them as TRL will use them. `main()`
runs only inside the sandbox (`checks/agents.py` starts it with `sandbox.run_module`); importing this module runs no
user code.

stdin: `{"agent": {...AgentSpec...}, "base_dir": str, "model": str | null, "template": "agent" | "model" | null,
"async": bool, "rewards": [{name, builtin, function, params}], "rollout_batch": {"prompts", "model", "training"} |
null}` (with a batch, the rollout function runs once on it: `rollout_probe.py`).
stdout: one line `@@AGENT_WORKER@@ {json}`: `{"problems": [{"field", "value", "message", "severity"}],
"environments": {field: {"tools": [...], "get_reward": bool}}}`.
"""

from __future__ import annotations

import inspect
import json
import pickle
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any

SAMPLE_ARGS = {"string": "7", "integer": 7, "number": 7.0, "boolean": True}


def _short(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {str(exc)[:400]}{where}"


def schema_problem(fn: Any) -> str | None:
    """Why TRL cannot build a tool's JSON schema (transformers' get_json_schema, which TRL uses), or None."""
    from transformers.utils import get_json_schema

    try:
        get_json_schema(fn)
    except Exception as exc:  # DocstringParsingException, TypeHintParsingException, ...
        return (
            f"{exc}. TRL builds the tool's JSON schema from its type hints and Google-style docstring: give every "
            "argument a type hint and document it under `Args:` (a one-line description first)."
        )
    return None


_UNPICKLE = "import pickle, sys\npickle.loads(sys.stdin.buffer.read())\n"


def _picklable(obj: Any) -> str | None:
    """Why `obj` cannot reach a spawned process (pickled here, unpickled by a fresh interpreter with the same
    sys.path, as multiprocessing's spawn does), or None."""
    import os
    import subprocess

    try:
        data = pickle.dumps(obj)
    except Exception as exc:
        return _short(exc)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    res = subprocess.run([sys.executable, "-c", _UNPICKLE], input=data, capture_output=True, timeout=60, env=env)
    if res.returncode:
        last = (res.stderr.decode(errors="replace").strip().splitlines() or ["?"])[-1]
        return (
            f"a fresh process cannot load it ({last[:300]}): a file.py target is imported under a private "
            "module name; use an importable `package.module:name`"
        )
    return None


def _public_methods(instance: Any) -> list[Any]:
    return [
        getattr(instance, n)
        for n, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction)
        if n not in ("reset", "get_reward") and not n.startswith("_")
    ]


def check_template(tokenizer: Any, tools: list[Any], kwargs: dict[str, Any]) -> list[str]:
    """Problems rendering tools with the tokenizer's chat template and parsing a tool call back (TRL's own tests)."""
    from transformers.utils import get_json_schema
    from trl.chat_template_utils import add_response_schema, parse_response, supports_tool_calling

    if not supports_tool_calling(tokenizer):
        return [
            "its chat template cannot render a tool-calling conversation (user -> assistant with tool_calls -> "
            "tool): TRL refuses it. Use a model whose chat template supports tools (Qwen2.5/Qwen3, Llama 3.1+, "
            "...), or set a tool-capable chat_template on its tokenizer."
        ]
    if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
        try:
            add_response_schema(tokenizer)
        except ValueError as exc:
            return [
                f"its tokenizer cannot parse a tool call back ({str(exc)[:200]}). TRL knows the response format "
                "of Qwen, Llama 3, GLM, GPT-OSS, Gemma 4 and a few more; otherwise set `response_template` on the "
                "tokenizer."
            ]
    if not tools:
        return []
    tool = tools[0]
    params = get_json_schema(tool)["function"]["parameters"].get("properties", {})
    args = {k: SAMPLE_ARGS.get(str(v.get("type")), "7") for k, v in params.items()}
    name = getattr(tool, "__name__", "tool")
    user = [{"role": "user", "content": "hi"}]
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": name, "arguments": args}}],
    }
    prefix = tokenizer.apply_chat_template(
        user, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False, **kwargs
    )
    full = tokenizer.apply_chat_template([*user, call], tools=tools, tokenize=True, return_dict=False, **kwargs)
    if list(full[: len(prefix)]) != list(prefix):
        return [
            "its chat template does not render the prompt as a prefix of the conversation; TRL swaps in a "
            "training template only for known model families."
        ]
    parsed = parse_response(tokenizer, list(full[len(prefix) :]), prefix=list(prefix), tools=tools)
    got = [tc.get("function", {}).get("name") for tc in parsed.get("tool_calls") or []]
    if name not in got:
        return [
            f"its tokenizer did not parse a rendered call of {name!r} back into a tool call (got "
            f"{parsed!r:.200}); "
            "TRL would see plain text and never run a tool. Set a matching `response_template` on the "
            "tokenizer."
        ]
    return []


@dataclass
class _Checks:
    """The checks of one request, in the order their problems are reported: tools, environments, rollout function,
    rewards (async only), then the tokenizer's tool calling."""

    agents: Any  # jobs/grpo_agents.py
    base: str | None
    is_async: bool
    problems: list[dict[str, Any]] = field(default_factory=list)
    envs: dict[str, Any] = field(default_factory=dict)
    tools: list[Any] = field(default_factory=list)  # every tool whose schema TRL can build, for the template check

    def problem(self, field: str, value: Any, message: str, severity: str = "error") -> None:
        self.problems.append({"field": field, "value": value, "message": message, "severity": severity})

    def _schema(self, where: str, target: Any, fn: Any) -> None:
        why = schema_problem(fn)
        if why:
            self.problem(where, target, why)
        else:
            self.tools.append(fn)

    def tool(self, where: str, target: Any) -> None:
        try:
            fn = self.agents.load_tool(str(target), self.base)
        except BaseException as exc:  # the user's module may raise anything
            self.problem(where, target, f"cannot be imported: {_short(exc)}.")
            return
        self._schema(where, target, fn)
        if self.is_async and (err := _picklable(fn)):
            self.problem(
                where,
                target,
                f"is not picklable ({err}); async GRPO sends tools to its rollout process. Define "
                "it at the top level of a module (no lambda, no closure).",
            )

    def environment(self, where: str, target: Any) -> None:
        try:
            factory = self.agents.load_environment(str(target), self.base)
            instance = factory()
        except BaseException as exc:
            self.problem(where, target, f"cannot be imported or built with no arguments: {_short(exc)}.")
            return
        methods = dict(inspect.getmembers(type(instance), predicate=inspect.isfunction))
        if "reset" not in methods:
            self.problem(
                where,
                target,
                "defines no `reset` method; TRL calls `reset(**row)` on each environment before "
                "every rollout (it returns the text appended to the prompt, or None). Add `def reset(self, "
                "**kwargs) -> str | None`.",
            )
        env_tools = _public_methods(instance)
        if not env_tools:
            self.problem(
                where,
                target,
                "has no public methods, so the model gets no tools from it; public methods "
                "(names not starting with _) become tools.",
                "warning",
            )
        for method in env_tools:
            self._schema(f"{where}.{method.__name__}", target, method)
        self.envs[where] = {"tools": [m.__name__ for m in env_tools], "get_reward": "get_reward" in methods}
        if self.is_async:
            self._environment_picklable(where, target, factory, instance)

    def _environment_picklable(self, where: str, target: Any, factory: Any, instance: Any) -> None:
        for what, obj in (("factory", factory), ("instance", instance)):
            if err := _picklable(obj):
                self.problem(
                    where,
                    target,
                    f"{what} is not picklable ({err}); async GRPO sends environments to its "
                    "rollout process. Define the class at the top level of a module.",
                )

    def rollout_func(self, target: Any, batch: dict[str, Any] | None) -> None:
        try:
            fn = self.agents.load_tool(str(target), self.base)
            if len(inspect.signature(fn).parameters) < 2:
                self.problem(
                    "agent.rollout_func",
                    target,
                    "must accept (prompts, trainer) and return a dict with prompt_ids, completion_ids and logprobs.",
                )
                return
        except BaseException as exc:
            self.problem("agent.rollout_func", target, f"cannot be imported: {_short(exc)}.")
            return
        if batch is None:
            return
        from grpo_dashboard.checks.rollout_probe import probe

        try:
            problems = probe(fn, batch)
        except BaseException as exc:
            self.problem(
                "agent.rollout_func",
                target,
                f"failed on one real batch of {len(batch['prompts'])} prompts (a GRPOTrainer on CPU with "
                f"{batch['model']}): {_short(exc)}.",
            )
            return
        if problems:
            self.problem(
                "agent.rollout_func",
                target,
                f"returned what TRL cannot train on, for one real batch of {len(batch['prompts'])} prompts: "
                + "; ".join(problems)
                + ". TRL needs a dict with prompt_ids and completion_ids (one token-id list per prompt), logprobs "
                "(one float per completion token, or None) and optional env_mask / extra keys.",
            )

    def hook(self, key: str, target: Any) -> None:
        """An async trainer hook's factory: importable, callable with the job's keyword arguments."""
        try:
            fn = self.agents.load_tool(str(target), self.base)
            params = inspect.signature(fn).parameters
        except BaseException as exc:
            self.problem(f"agent.{key}", target, f"cannot be imported: {_short(exc)}.")
            return
        context = ("model", "args", "train_dataset", "reward_funcs")
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            missing = [c for c in context if c not in params]
            if missing:
                self.problem(
                    f"agent.{key}",
                    target,
                    f"must accept the keyword arguments {list(context)} (or **kwargs); it lacks {missing}. The job "
                    f"calls it to build AsyncGRPOTrainer's `{key}=`.",
                )

    def rewards(self, rewards: list[dict[str, Any]]) -> None:
        from grpo_dashboard.spec.jobfiles import rewards_module

        registry = rewards_module()
        for i, r in enumerate(rewards):
            try:
                fn = registry.build_reward(
                    r["name"], r.get("builtin"), r.get("function"), dict(r.get("params") or {}), self.base
                )
            except BaseException as exc:
                self.problem(f"rewards[{i}]", r["name"], f"cannot be built: {_short(exc)}.")
                continue
            if err := _picklable(fn):
                self.problem(
                    f"rewards[{i}]",
                    r["name"],
                    f"is not picklable ({err}); async GRPO sends reward functions to "
                    "its rollout process: use a top-level function in a file (`function: file.py:name`), no "
                    "lambda or closure.",
                )

    def template(self, template: str, model: str | None, kwargs: dict[str, Any]) -> None:
        try:
            tokenizer = _tokenizer(template, model, self.agents)
        except BaseException as exc:
            self.problem(
                "model.name_or_path",
                model,
                f"its tokenizer could not be loaded here to check tool calling "
                f"({_short(exc)}); the job checks it when it starts.",
                "warning",
            )
            return
        for message in check_template(tokenizer, self.tools, kwargs):
            self.problem("model.name_or_path", model, message)


def _environments(env: Any) -> list[tuple[str, Any]]:
    """(field, target) of each environment factory: one, or a dict of named ones."""
    named = env.items() if isinstance(env, dict) else ([(None, env)] if env else [])
    return [("agent.environment_factory" + (f".{name}" if name is not None else ""), target) for name, target in named]


def run(request: dict[str, Any]) -> dict[str, Any]:
    """Every check of one request (see the module docstring)."""
    sys.path.insert(0, str(request.get("base_dir") or "."))
    from grpo_dashboard.spec.jobfiles import agents_module

    agent = request["agent"]
    checks = _Checks(agents_module(), request.get("base_dir"), bool(request.get("async")))
    for i, target in enumerate(agent.get("tools") or []):
        checks.tool(f"agent.tools[{i}]", target)
    for where, target in _environments(agent.get("environment_factory")):
        if not str(target).startswith("openenv:"):  # probed outside the sandbox: checks/agents_openenv.py
            checks.environment(where, target)
    if agent.get("rollout_func"):
        checks.rollout_func(agent["rollout_func"], request.get("rollout_batch"))
    if checks.is_async:
        checks.rewards(request.get("rewards") or [])
        for key in ("rollout_worker", "weight_transfer"):
            if agent.get(key):
                checks.hook(key, agent[key])
    template, model = request.get("template"), request.get("model")
    if template and (checks.tools or agent.get("environment_factory")):
        checks.template(template, model, dict(agent.get("chat_template_kwargs") or {}))
    return {"problems": checks.problems, "environments": checks.envs}


def _tokenizer(template: str, model: str | None, agents: Any) -> Any:
    from transformers import AutoTokenizer

    if template == "agent":  # the warmed tiny model is not built yet: check the tokenizer it will get
        import tempfile

        from grpo_dashboard.spec.jobfiles import job_module

        with tempfile.TemporaryDirectory() as tmp:
            import grpo_agent_model  # beside grpo_agents in jobs/, on sys.path

            return grpo_agent_model.agent_tokenizer(job_module().build_tiny_model(f"{tmp}/tiny"))
    return AutoTokenizer.from_pretrained(model)


def main() -> int:
    """Read the request from stdin, write the result as one JSON line to the sandbox's report channel (never stdout,
    where the user's tools and environments print)."""
    from grpo_dashboard.checks.sandbox import report_channel

    out = report_channel("agent_worker")
    request = json.loads(sys.stdin.read())
    sys.stdout = sys.stderr  # the user's prints go to the log tail
    try:
        result = run(request)
    except BaseException as exc:
        result = {
            "problems": [
                {
                    "field": "agent",
                    "value": None,
                    "message": f"could not be checked: {_short(exc)}",
                    "severity": "error",
                }
            ],
            "environments": {},
        }
    out.write(json.dumps(result, default=repr) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
