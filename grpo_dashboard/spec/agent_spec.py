"""The run spec's `agent:` section: tools, environments and the multi-turn loop, under TRL's names.

The job reads it in `jobs/grpo_agents.py` (built-in tools and environments, process rewards, the warmed tiny
tool-calling model); `checks/agents.py` checks it before launch, importing custom code only in the sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_dashboard.spec import safe_yaml
from grpo_dashboard.spec.paths import user_path


@dataclass
class AgentSpec:
    """Tool-using, multi-turn GRPO (GRPOTrainer's `tools=`, `environment_factory=`, `rollout_func=`).

    `tools`: built-in names (calculator) or `file.py:function` / `package.module:function`.
    `environment_factory`: a built-in (guess_number), `file.py:Class`, or an OpenEnv server (`openenv:http://...`,
    or `openenv:package.module:app`, which the run starts and stops), or a mapping name -> one of those, selected
    per row by the dataset's `environment` column. Without a dataset source the environment owns the prompts (its
    `reset()` returns them) and `training.max_steps` is required. `max_tool_calling_iterations` and
    `chat_template_kwargs` are GRPOConfig's own fields. `log_columns`: dataset columns recorded with every sample
    (for per-task charts and filters). `trainer: async_grpo` trains with TRL's experimental AsyncGRPOTrainer (a
    vLLM server and a GPU; `async_config` holds AsyncGRPOConfig's own fields; `rollout_worker` / `weight_transfer`
    name `package.module:factory` callables building AsyncGRPOTrainer's `rollout_worker=` / `weight_transfer=`,
    called with the keyword arguments `model`, `args`, `train_dataset`, `reward_funcs`). `tiny_warmup`: with
    `model.build_tiny`, the tiny model is taught the tool-call format before GRPO (prebuilt, shipped in jobs/).
    """

    tools: list[str] = field(default_factory=list)
    environment_factory: str | dict[str, str] | None = None
    max_tool_calling_iterations: int | None = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    rollout_func: str | None = None
    log_columns: list[str] = field(default_factory=list)
    trainer: str = "grpo"
    async_config: dict[str, Any] = field(default_factory=dict)
    rollout_worker: str | None = None
    weight_transfer: str | None = None
    tiny_warmup: bool = False

    def __post_init__(self) -> None:
        # The form edits a mapping as flow YAML text (`{game: guess_number, calc: envs.py:Calc}`).
        env = self.environment_factory
        if isinstance(env, str) and env.strip().startswith("{"):
            parsed = safe_yaml.load(env, what="agent.environment_factory", field="agent.environment_factory")
            self.environment_factory = {str(k): str(v) for k, v in parsed.items()} if isinstance(parsed, dict) else env
        elif isinstance(env, str) and not env.strip():
            self.environment_factory = None

    @property
    def environments(self) -> dict[str | None, str]:
        """The environment factories by name (one unnamed entry for a single factory)."""
        env = self.environment_factory
        if not env:
            return {}
        return {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {None: env}

    def code_targets(self) -> list[tuple[str, str]]:
        """(field, target) of every user-code reference: tools, environments and rollout_func."""
        out = [(f"agent.tools[{i}]", t) for i, t in enumerate(self.tools)]
        for name, target in self.environments.items():
            out.append(("agent.environment_factory" + (f".{name}" if name is not None else ""), target))
        if self.rollout_func:
            out.append(("agent.rollout_func", self.rollout_func))
        for key in ("rollout_worker", "weight_transfer"):
            if getattr(self, key):
                out.append((f"agent.{key}", str(getattr(self, key))))
        return out


def is_file_target(target: str) -> bool:
    """True for `path/to/file.py:name` references (their file travels with the run)."""
    return ":" in target and target.rsplit(":", 1)[0].endswith(".py")


def map_files(agent: AgentSpec | None, move: Any) -> None:
    """Rewrite every `file.py:name` of the agent section in place with `move(path) -> new path` (absolute paths for
    run.yaml, the bucket path on HF Jobs)."""
    if agent is None:
        return

    def fix(target: str) -> str:
        if not is_file_target(target):
            return target
        path, attr = target.rsplit(":", 1)
        return f"{move(path)}:{attr}"

    agent.tools = [fix(t) for t in agent.tools]
    env = agent.environment_factory
    if isinstance(env, dict):
        agent.environment_factory = {k: fix(v) for k, v in env.items()}
    elif env:
        agent.environment_factory = fix(env)
    if agent.rollout_func:
        agent.rollout_func = fix(agent.rollout_func)


def resolve(base: Path, value: str) -> Path:
    """A spec path relative to the spec's directory."""
    p = user_path(value)
    return p if p.is_absolute() else base / p
