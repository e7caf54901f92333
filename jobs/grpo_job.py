# /// script
# requires-python = ">=3.11"
# dependencies = [
#     "trl>=1.16,<2",
#     "transformers>=5,<6",
#     "datasets>=4,<6",
#     "accelerate>=1,<2",
#     "pyyaml>=6,<7",
#     "math-verify>=0.9,<1",
#     "jsonschema>=4,<5",
# ]
# ///
"""Run one GRPO training from a GRPO Dashboard run spec, streaming every log record as JSON lines.

Usage: `python jobs/grpo_job.py --config run.yaml [--metrics metrics.jsonl]` (also `uv run` on Hugging Face Jobs and
`accelerate launch jobs/grpo_job.py --config run.yaml` for several processes). Self-contained: imports nothing from
`grpo_dashboard`; its siblings in `jobs/` (`grpo_rewards.py` and the modules it imports) ship with it.

run.yaml is the dashboard's resolved spec (`RunSpec.to_job_yaml`): every value this script reads is written there,
defaults included, and read as a required key (`need`), so no default of the spec is re-typed here. `training:`
holds only the GRPOConfig fields the user set; TRL's own defaults apply to the rest.

What both sides of the contract need is defined here once and read by the dashboard from this file
(`grpo_dashboard.spec.jobfiles.job_module`): the stdout `MARKER`, the local `DATA_FILE_TYPES`, the prompt mapping
(`prompt_renderer`, the dataset preview's too) and the rule for running the health rules in the job
(`wants_job_health`).

Line protocol (the contract between jobs and the dashboard, identical for every backend): each record is one JSON
object, written both to stdout behind the marker `@@GRPO_DASHBOARD@@ ` and, flushed per line, to `metrics.jsonl`:
- `{"v": 1, "type": "log", "split": "train"|"eval", "step": int, "time": unix_s, "max_steps": int, "metrics": {...}}`
  with every key TRL logged, verbatim (NaN, Infinity and null allowed);
- `{"v": 1, "type": "log", "split": "system", "step": wall_ms, "time": unix_s, "metrics": {"system/...": ...}}`: a
  system sample (`grpo_job_setup.SystemSampler`: this process's CPU and memory at every log; with CUDA, the GPUs'
  utilisation and memory too, also every GRPO_JOB_SYSTEM_INTERVAL_S between logs). Its step is its wall time in ms;
  it does not count as a logged training step;
- `{"v": 1, "type": "event", "event": "starting"|"started"|"checkpoint"|"finished"|"failed"|"canceled", "time":
  unix_s, ...}`: `started` carries `config` (the resolved GRPOConfig) and `max_steps`; `checkpoint` carries `step` and
  `path` (a checkpoint was saved); `failed` carries `error_type`, `message` and `traceback`; `canceled` carries `step`.
- With GRPO_JOB_SAMPLES_STDOUT=1 (remote jobs), each sample completion written to samples.jsonl is also printed
  behind `@@GRPO_DASHBOARD_SAMPLE@@ ` (`grpo_job_setup.SAMPLE_MARKER`), so it travels back with the log.
- With the health guard or alerts on (`health:` in the spec), before `finished`: `guard_stop` (`step`, `rule`,
  `severity`, `onset`, `message`, `remedy`, `checkpoint`) when the guard stopped training, and `health_summary`
  (`evaluations`, `spent_s`, `train_s`, `overhead`, `alerts`, `webhook_posts`, `alert_failures`). The rules are the
  dashboard's own, shipped beside run.yaml as `grpo_health/` (numpy and the standard library only).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grpo_agent_model
import grpo_agents
import grpo_job_setup
import grpo_rewards

MARKER = "@@GRPO_DASHBOARD@@ "
PROTOCOL_VERSION = 1
EXIT_FAILED = 1
EXIT_CANCELED = 143
NO_CALLBACK_ENV = "GRPO_JOB_NO_CALLBACK"  # "1": no dashboard callback (benchmark switch)
MAX_SAMPLES_PER_STEP = 64  # completions of each logged step written to samples.jsonl
# Local data files by suffix -> the `datasets` builder that reads them (the dashboard's validation reads this map).
DATA_FILE_TYPES = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}

TINY_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n.,:;!?'\"-+*/=()<>_"
TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>' + message['content'] + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


class Emitter:
    """Writes protocol records to stdout (behind the marker) and appends them to metrics.jsonl, one flush per line."""

    def __init__(self, path: Path | None, enabled: bool = True, stdout: bool = True) -> None:
        self.enabled = enabled
        self.stdout = stdout  # False: metrics.jsonl only (a user's own script with the dashboard's callback)
        self._file = open(path, "a", encoding="utf-8") if (path is not None and enabled) else None
        self._lock = threading.Lock()  # the system sampler's thread emits too: whole lines only

    def emit(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        line = json.dumps({"v": PROTOCOL_VERSION, **record}, default=_json_default)
        with self._lock:
            if self._file is not None:
                self._file.write(line + "\n")
                self._file.flush()
            if self.stdout:
                sys.stdout.write(MARKER + line + "\n")
                sys.stdout.flush()

    def event(self, event: str, **fields: Any) -> None:
        self.emit({"type": "event", "event": event, "time": time.time(), **fields})

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


class RunYamlError(ValueError):
    """run.yaml lacks a value this script reads: it was not written by this version of the dashboard."""


def need(section: Any, key: str, where: str = "") -> Any:
    """`section[key]` of the resolved run.yaml; RunYamlError naming `where + key` when it is missing.

    `where` is the key's place in run.yaml, e.g. "dataset." or "rewards[0].".
    """
    if not isinstance(section, Mapping) or key not in section:
        raise RunYamlError(
            f"run.yaml has no {where}{key}: it was written by an older dashboard (or by hand). Relaunch it with "
            "`python -m grpo_dashboard launch run.yaml`, which writes every resolved value the job reads."
        )
    return section[key]


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "value"):
        return value.value
    return str(value)


def _is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def build_tiny_model(path: str | Path, seed: int = 0) -> Path:
    """Build a random-initialised 2-layer Qwen2 with a character-level tokenizer and a chat template at `path`.

    Idempotent and safe under concurrency: builds into a temporary sibling directory, then renames it into place.
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    target = Path(path).expanduser()
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>"]
    vocab = {tok: i for i, tok in enumerate(specials + list(dict.fromkeys(TINY_CHARS)))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(specials)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        unk_token="<unk>",
        padding_side="left",
    )
    tokenizer.chat_template = TINY_CHAT_TEMPLATE
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(vocab),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        pad_token_id=vocab["<pad>"],
        eos_token_id=vocab["<eos>"],
        bos_token_id=vocab["<bos>"],
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = vocab["<pad>"]
    model.generation_config.eos_token_id = vocab["<eos>"]
    return save_atomically(model, tokenizer, target)


def save_atomically(model: Any, tokenizer: Any, target: Path) -> Path:
    """save_pretrained into a temporary sibling of `target`, then rename it into place (a concurrent builder that
    got there first wins; its copy is kept)."""
    import shutil

    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        os.rename(tmp, target)
    except OSError:
        if not (target / "config.json").is_file():
            raise
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _data_files(files: str | list[str]) -> tuple[str, list[str]]:
    files = [files] if isinstance(files, str) else list(files)
    ext = Path(files[0]).suffix.lower()
    builder = DATA_FILE_TYPES.get(ext)
    if builder is None:
        raise ValueError(
            f"dataset: unsupported local file type {ext.lstrip('.')!r}; use {', '.join(DATA_FILE_TYPES)}."
        )
    return builder, files


def load_split(ds_spec: Mapping[str, Any], split: str | None, files: str | list[str] | None) -> Any:
    """Load one split: local files (JSON/JSONL/CSV/Parquet) or a Hub dataset (path, config, split)."""
    from datasets import load_dataset

    streaming = bool(need(ds_spec, "streaming", "dataset."))
    if files:
        builder, data_files = _data_files(files)
        return load_dataset(builder, data_files=data_files, split="train", streaming=streaming)
    return load_dataset(
        need(ds_spec, "path", "dataset."),
        need(ds_spec, "config", "dataset."),
        split=split,
        revision=need(ds_spec, "revision", "dataset."),
        streaming=streaming,
    )


def _prompt_settings(ds_spec: Mapping[str, Any]) -> tuple[str, str | None, str | None, bool]:
    system = need(ds_spec, "system_prompt", "dataset.")
    chat = bool(need(ds_spec, "conversational", "dataset.")) or bool(system)
    return need(ds_spec, "prompt_column", "dataset."), need(ds_spec, "prompt_template", "dataset."), system, chat


def prompt_renderer(ds_spec: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], str | list[dict[str, Any]]]:
    """The function giving the prompt TRL gets for one row, from the spec's prompt_column / prompt_template /
    system_prompt / conversational. The dashboard's dataset preview calls this very function."""
    column, template, system, chat = _prompt_settings(ds_spec)

    def render(row: Mapping[str, Any]) -> str | list[dict[str, Any]]:
        value = template.format(**row) if template else row[column]
        if isinstance(value, list):
            messages = list(value)
            if system and not (messages and messages[0].get("role") == "system"):
                messages = [{"role": "system", "content": system}, *messages]
            return messages
        if chat:
            messages = [{"role": "user", "content": str(value)}]
            if system:
                messages.insert(0, {"role": "system", "content": system})
            return messages
        return str(value)

    return render


def map_prompts(dataset: Any, ds_spec: Mapping[str, Any]) -> Any:
    """Produce TRL's `prompt` column with `prompt_renderer` (a dataset already in that shape is left as it is)."""
    column, template, _, chat = _prompt_settings(ds_spec)
    if column == "prompt" and not template and not chat:
        return dataset
    render = prompt_renderer(ds_spec)
    return dataset.map(lambda row: {"prompt": render(row)})


def wants_job_health(health: Mapping[str, Any] | None) -> bool:
    """True when a spec's `health:` settings turn on the guard or alerts: the job then runs the health rules itself,
    from the copy shipped beside run.yaml. The dashboard ships that copy when this says so (`HealthSpec.in_job`)."""
    h = health or {}
    return bool(h.get("guard") or h.get("alerts") or h.get("webhook_url"))


def load_health_package(spec: Mapping[str, Any], config_dir: Path) -> ModuleType | None:
    """The shipped copy of the dashboard's health rules (`grpo_health/` beside run.yaml) when the spec asks for the
    guard or alerts; None otherwise. Raises FileNotFoundError when it is needed but was not shipped."""
    if not wants_job_health(need(spec, "health")):
        return None
    package = config_dir / "grpo_health"
    if not (package / "__init__.py").is_file():
        raise FileNotFoundError(
            f"health.guard/alerts are on but {package} is missing; launch through the dashboard (it ships the rules "
            "there) or copy grpo_dashboard/health/ to that path."
        )
    module_spec = importlib.util.spec_from_file_location(
        "grpo_health", package / "__init__.py", submodule_search_locations=[str(package)]
    )
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    sys.modules["grpo_health"] = module
    module_spec.loader.exec_module(module)
    return module


def _rank0_decides(flag: bool) -> bool:
    """Every process adopts the main process's decision (a guard stop must stop all of them at the same step)."""
    try:
        import torch.distributed as dist
    except ImportError:
        return flag
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return flag
    box = [flag]
    dist.broadcast_object_list(box, src=0)
    return bool(box[0])


def _any_rank(flag: bool) -> bool:
    """True on every process when `flag` is true on any of them (one tiny all-reduce per call under torch.distributed;
    the flag itself otherwise)."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return flag
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return flag
    cuda = dist.get_backend() == "nccl"
    box = torch.tensor([1 if flag else 0], device=torch.device("cuda", torch.cuda.current_device()) if cuda else "cpu")
    dist.all_reduce(box, op=dist.ReduceOp.MAX)
    return bool(box.item())


def make_callback(
    emitter: Emitter, samples_path: Path | None, max_samples: int, health: Any = None, guard: bool = False
) -> Any:
    """Build the TrainerCallback that streams records, runs the health guard/alerts, and honours cancellation."""
    from transformers import TrainerCallback

    class DashboardCallback(TrainerCallback):
        def __init__(self) -> None:
            self.trainer: Any = None
            self.stop_requested = False
            self.guard_stop: Any = None
            self.t0 = time.time()
            self.system = grpo_job_setup.SystemSampler(emitter.emit)

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.t0 = time.time()
            if state.is_world_process_zero:
                config = _config_dict(args)
                emitter.event("started", max_steps=state.max_steps, config=config, world_size=args.world_size)
                if health is not None:
                    health.begin({**config, **_reward_config(self.trainer)})
                self.system.start()

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.system.stop()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            # Every rank stops at the step where any rank was told to: a rank that stopped alone left the others
            # in their next collective, which fails ("Connection reset by peer") and ended a cancel as a failure.
            if _any_rank(self.stop_requested):
                self.stop_requested = True
                control.should_training_stop = True

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.is_world_process_zero:
                path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
                emitter.event("checkpoint", step=state.global_step, path=str(path))

        def on_log(
            self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
        ) -> None:
            stop = None
            if state.is_world_process_zero and logs:
                split = "eval" if any(k.startswith("eval_") for k in logs) else "train"
                if split == "train" and "reward" in logs and self.trainer is not None:
                    logs.update(grpo_agents.episode_metrics(self.trainer))  # agent/* and tasks/* (tool runs only)
                emitter.emit(
                    {
                        "type": "log",
                        "split": split,
                        "step": state.global_step,
                        "time": time.time(),
                        "elapsed": time.time() - self.t0,
                        "max_steps": state.max_steps,
                        "metrics": dict(logs),
                    }
                )
                self.system.sample()
                if samples_path is not None and split == "train" and "reward" in logs and self.trainer is not None:
                    _write_samples(samples_path, state.global_step, self.trainer, max_samples)
                if health is not None and self.guard_stop is None:
                    stop = health.observe(logs, state.global_step, last=state.global_step >= state.max_steps)
            if guard and self.guard_stop is None and _rank0_decides(stop is not None):
                # Stop cleanly: the trainer saves a checkpoint of this step (on_log runs before its save check).
                self.guard_stop = stop if stop is not None else True
                control.should_training_stop = True
                control.should_save = True

    return DashboardCallback()


def health_events(emitter: Any, health: Any, step: int, output_dir: str | Path, train_s: float) -> None:
    """After training: `guard_stop` when the guard stopped it, and `health_summary` (both only with `health`)."""
    if health is None:
        return
    stop = health.stop
    if stop is not None:
        checkpoint = Path(output_dir) / f"checkpoint-{step}"
        emitter.event(
            "guard_stop",
            step=step,
            rule=stop.rule,
            severity=stop.severity,
            onset=stop.step,
            message=stop.message,
            remedy=stop.remedy,
            checkpoint=str(checkpoint) if checkpoint.is_dir() else None,
        )
    emitter.event("health_summary", **health.summary(train_s))


def _reward_config(trainer: Any) -> dict[str, Any]:
    """Reward function names and weights, for the health rules (format vs accuracy rewards, remedies)."""
    if trainer is None:
        return {}
    names = list(getattr(trainer, "reward_func_names", None) or [])
    weights = getattr(trainer, "reward_weights", None)
    out: dict[str, Any] = {"reward_names": names} if names else {}
    if weights is not None:
        out["reward_weights"] = [float(w) for w in weights.tolist()] if hasattr(weights, "tolist") else list(weights)
    return out


def _write_samples(path: Path, step: int, trainer: Any, limit: int) -> None:
    # trainer._logs is private TRL state (deques of the last generation batch); read defensively.
    logs = getattr(trainer, "_logs", None)
    if not isinstance(logs, dict) or not logs.get("completion"):
        return
    prompts, completions = list(logs.get("prompt", [])), list(logs.get("completion", []))
    advantages = list(logs.get("advantages", []))
    rewards = {name: list(vals) for name, vals in (logs.get("rewards") or {}).items()}
    extra = {name: list(vals) for name, vals in (logs.get("extra") or {}).items()}
    outcomes = extra.pop(
        grpo_agents.grpo_tool_calls.OUTCOMES_COLUMN, None
    )  # not a column: how result-less calls ended
    # A rollout_func's own `turns` (one conversation per prompt) replace TRL's one-message decoding of its tokens
    turns = getattr(getattr(trainer, "rollout_func", None), "last_turns", None)
    if isinstance(turns, list) and len(turns) == len(completions):
        completions = turns
    rows = []
    for i, completion in enumerate(completions[:limit]):
        rows.append(
            {
                "step": step,
                "prompt": prompts[i] if i < len(prompts) else None,
                "completion": completion,
                "rewards": {n: (v[i] if i < len(v) else None) for n, v in rewards.items()},
                "advantage": advantages[i] if i < len(advantages) else None,
                **({"extra": {n: (v[i] if i < len(v) else None) for n, v in extra.items()}} if extra else {}),
                **(
                    {"tool_outcomes": grpo_agents.sample_outcomes(outcomes[i] if i < len(outcomes) else None) or []}
                    if outcomes is not None
                    else {}
                ),
            }
        )
    with open(path, "a", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, default=_json_default) + "\n")
            grpo_job_setup.print_sample(row, _json_default)


def _config_dict(args: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in args.to_dict().items():
        if "token" in key.lower():
            continue
        if isinstance(value, float) and not math.isfinite(value):
            value = str(value)
        out[key] = value
    return out


def _preparing(emitter: Emitter) -> Callable[[str, int | None, int | None], None]:
    """A progress callback for work before training (the agent model's warm-up): a `preparing` event (the
    dashboard shows its message as the run's status) and the same line in the log."""

    def report(message: str, done: int | None, total: int | None) -> None:
        emitter.event("preparing", message=message, done=done, total=total)
        print(message, flush=True)

    return report


def run(spec: dict[str, Any], emitter: Emitter, samples_path: Path | None, base_dir: Path) -> int:
    """Build dataset, model and rewards from `spec` (the resolved run.yaml) and train; return the exit code."""
    callback_holder: dict[str, Any] = {}
    health_pkg = load_health_package(spec, base_dir)
    health_settings = need(spec, "health")
    model_spec, ds_spec, reward_specs = need(spec, "model"), need(spec, "dataset"), need(spec, "rewards")
    output_dir, save_model = need(spec, "output_dir"), need(spec, "save_model")
    training = dict(need(spec, "training") or {})
    agent = need(spec, "agent")

    def on_sigterm(signum: int, frame: Any) -> None:
        cb = callback_holder.get("cb")
        if cb is None:
            emitter.event("canceled", step=0)
            sys.stdout.flush()
            os._exit(EXIT_CANCELED)
        cb.stop_requested = True

    signal.signal(signal.SIGTERM, on_sigterm)

    model_path = str(need(model_spec, "name_or_path", "model."))
    if need(model_spec, "build_tiny", "model."):
        if agent and agent.get("tiny_warmup"):  # the tiny model taught tool calls (jobs/grpo_agent_model.py)
            built = grpo_agent_model.build_warm_model(
                model_path, build_tiny_model, save_atomically, progress=_preparing(emitter)
            )
        else:
            built = build_tiny_model(model_path)
        model_path = str(built)

    # With local files a split's name is not used: each file list is one split.
    train_split, train_files = need(ds_spec, "split", "dataset."), need(ds_spec, "data_files", "dataset.")
    eval_split, eval_files = need(ds_spec, "eval_split", "dataset."), need(ds_spec, "eval_data_files", "dataset.")
    if need(ds_spec, "mixture", "dataset."):
        train, eval_ds = grpo_job_setup.load_mixture(ds_spec)
        train, eval_ds = map_prompts(train, ds_spec), map_prompts(eval_ds, ds_spec) if eval_ds is not None else None
    else:
        train = (
            None
            if grpo_agents.datasetless(agent, ds_spec)
            else map_prompts(load_split(ds_spec, train_split, train_files), ds_spec)
        )
        eval_ds = (
            map_prompts(load_split(ds_spec, eval_split, eval_files), ds_spec) if eval_split or eval_files else None
        )

    funcs, weights = [], []
    for i, r in enumerate(reward_specs):
        where = f"rewards[{i}]."
        weights.append(float(need(r, "weight", where)))
        if need(r, "model", where):  # a reward model: TRL loads it (AutoModelForSequenceClassification)
            funcs.append(str(r["model"]))
            continue
        funcs.append(
            grpo_rewards.build_reward(
                need(r, "name", where),
                need(r, "builtin", where),
                need(r, "function", where),
                dict(need(r, "params", where) or {}),
                str(base_dir),
            )
        )
    # A streamed Hub dataset may not know its columns before the first row (column_names is None then).
    funcs = grpo_agents.tag_rewards(funcs, agent, list(train.column_names or []) if train is not None else [])
    training.setdefault("report_to", "none")  # the job's own choice (no tracker unless asked), not a TRL default
    init_kwargs = dict(training.pop("model_init_kwargs", None) or {})
    dtype = need(model_spec, "dtype", "model.")
    if dtype and dtype != "auto":
        init_kwargs.setdefault("dtype", dtype)
    for key, value in (
        ("revision", need(model_spec, "revision", "model.")),
        ("attn_implementation", need(model_spec, "attn_implementation", "model.")),
    ):
        if value:
            init_kwargs.setdefault(key, value)
    if need(model_spec, "trust_remote_code", "model."):
        training["trust_remote_code"] = True
    lora = need(model_spec, "lora", "model.")
    quantization = grpo_job_setup.quantization_config(model_spec)
    if quantization is not None:
        init_kwargs["quantization_config"] = quantization

    config_class, trainer_class = grpo_agents.trainer_classes(agent)
    config = config_class(
        **training,
        **grpo_agents.config_kwargs(agent),
        **grpo_agents.grpo_only(agent, reward_weights=weights),
        output_dir=output_dir,
        model_init_kwargs=init_kwargs or None,
        logging_nan_inf_filter=False,
    )
    peft_config = grpo_job_setup.peft_config(lora)

    health = None  # grpo_health.JobHealth on the main process when the guard or alerts are on
    if health_pkg is not None and _is_main_process():
        health = health_pkg.JobHealth(health_settings, run_name=need(spec, "name"), report_to=config.report_to)
    guard = health_pkg is not None and bool(need(health_settings, "guard", "health."))
    callback = make_callback(emitter, samples_path, MAX_SAMPLES_PER_STEP, health=health, guard=guard)
    # GRPO_JOB_NO_CALLBACK=1 trains without the dashboard callback (no metrics stream, cancellation or guard): only
    # for benchmarks/training_overhead.py, which measures what the callback costs.
    callbacks = [] if os.environ.get(NO_CALLBACK_ENV) == "1" else [callback]
    trainer = trainer_class(
        model=model_path,
        reward_funcs=funcs,
        args=config,
        train_dataset=train,
        callbacks=callbacks,
        peft_config=peft_config,
        processing_class=grpo_job_setup.processing_class(model_path, model_spec),
        **grpo_agents.grpo_only(agent, eval_dataset=eval_ds),
        **grpo_agents.trainer_kwargs(agent, base_dir),
        **grpo_agents.async_hooks(
            agent, base_dir, model=model_path, args=config, train_dataset=train, reward_funcs=funcs
        ),
    )
    names = [str(r["name"]) for r in reward_specs]
    if len(getattr(trainer, "reward_func_names", [])) == len(names):
        trainer.reward_func_names = names  # a reward model logs as rewards/<its spec name>/mean, as a function does
    callback.trainer = trainer
    callback_holder["cb"] = callback
    t0 = time.perf_counter()
    try:
        trainer.train(resume_from_checkpoint=config.resume_from_checkpoint)  # TRL's grpo script does the same
    finally:
        if health is not None:
            health.close()
        grpo_agents.grpo_openenv.stop_servers()  # the OpenEnv servers this run started end with it
    step = trainer.state.global_step
    health_events(emitter, health, step, output_dir, time.perf_counter() - t0)
    if callback.stop_requested:
        emitter.event("canceled", step=step)
        return EXIT_CANCELED
    if save_model:
        trainer.save_model(output_dir)
    emitter.event("finished", step=step)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point: parse arguments, run, and report failures as protocol events."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="Run spec YAML (as written by the dashboard).")
    parser.add_argument("--metrics", default=None, help="metrics.jsonl path (default: beside the config).")
    parser.add_argument("--build-tiny-model", action="store_true", help="Only build the tiny model and exit.")
    args = parser.parse_args(argv)

    import yaml

    config_path = Path(args.config).resolve()
    spec = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    if args.build_tiny_model:
        agent = need(spec, "agent") or {}
        path = spec["model"]["name_or_path"]
        print(
            grpo_agent_model.build_warm_model(path, build_tiny_model, save_atomically)
            if agent.get("tiny_warmup")
            else build_tiny_model(path)
        )
        return 0
    metrics_path = Path(args.metrics) if args.metrics else config_path.parent / "metrics.jsonl"
    main_proc = _is_main_process()
    emitter = Emitter(metrics_path, enabled=main_proc)
    samples_path = metrics_path.parent / "samples.jsonl" if main_proc else None
    emitter.event("starting", pid=os.getpid())
    try:
        return run(spec, emitter, samples_path, config_path.parent)
    except BaseException as exc:  # every failure must reach the dashboard as an event
        if isinstance(exc, SystemExit) and not exc.code:
            raise
        tb = traceback.format_exc()
        emitter.event("failed", error_type=type(exc).__name__, message=str(exc)[:4000], traceback=tb[-8000:])
        traceback.print_exc()
        return EXIT_FAILED
    finally:
        emitter.close()


if __name__ == "__main__":
    sys.exit(main())
