"""Export a run spec as a flat TRL config that `trl grpo --config` accepts, with the equivalent command lines.

Every setting TRL has a key for is written as that key (model, LoRA/QLoRA, dataset or mixture, GRPOConfig fields,
rewards, `num_processes` / `accelerate_config`, `env`). What TRL has no key for (the run name, the prompt mapping,
reward parameters, backend and health settings) rides in one `# grpo-dashboard:` comment line, which TRL ignores and
`trl_import` reads back, so `import_trl(export_trl(spec))` gives the spec again. Rewards that are not one of TRL's own
are reached through a generated module beside the recipe (`<recipe>_rewards.py`) that builds this dashboard's
built-ins; `reward_funcs` names them by dotted path, as TRL's grpo script expects, and the recipe's `env` puts the
recipe's folder on PYTHONPATH so that module imports from any working directory. A spec whose prompts the job maps
(prompt column, template, system prompt, chat template) or whose tiny model the job builds gets a prepare script
(trl_prepare) and a recipe that names the prepared data by absolute path; so does one with a local eval file, which
TRL's keys cannot name: the recipe then gives TRL the prepared folder as `dataset_name` with its train and test
splits, so `trl grpo` evaluates on the job's eval prompts.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from grpo_dashboard.errors import FieldError, SpecError
from grpo_dashboard.spec import trl_keys
from grpo_dashboard.spec.run_spec import (
    BackendSpec,
    DatasetSpec,
    HealthSpec,
    LoraSpec,
    ModelSpec,
    RewardSpec,
    RunSpec,
)
from grpo_dashboard.spec.trl_parse import HEADER
from grpo_dashboard.spec.trl_prepare import (
    absolute_paths,
    job_path_lines,
    needs_prepare,
    prepare_script,
    prepared_files,
    prepared_folder,
    prepares_data,
)
from grpo_dashboard.spec.trl_rewards import GENERATED, TRL_REWARDS
from grpo_dashboard.spec.vllm_serve import serve_command, training_gpus

VLLM_DEFAULT_PORT = 8000  # GRPOConfig.vllm_server_port


@dataclass
class Export:
    """The flat YAML, the rewards module it needs (None: only TRL's own rewards), and the equivalent commands."""

    yaml_text: str
    rewards_module: str | None
    rewards_module_name: str
    commands: dict[str, str]
    prepare_script: str | None = None  # run once before `trl grpo` (trl_prepare); None: nothing to prepare
    prepare_name: str = ""
    notes: list[str] = dataclasses.field(default_factory=list)  # what the export cannot carry to `trl grpo`


def _trl_name(r: RewardSpec) -> str | None:
    """TRL's own reward of the same name and behaviour, or None."""
    entry = TRL_REWARDS.get(r.name)
    if entry and not r.function and not r.model and (r.builtin or r.name) == entry[0] and r.params == entry[1]:
        return r.name
    return None


def export_trl(spec: RunSpec, recipe_path: str | Path = "recipe.yaml", base: Path | None = None) -> Export:
    """The flat TRL config of `spec` (SpecError when a setting cannot be written as TRL keys).

    `base`: the directory the spec's relative paths are taken against (the CLI's working directory); with it every
    local path in the recipe is absolute, so `trl grpo` finds them from any directory."""
    if base is not None:
        spec = absolute_paths(spec, base)
    path = Path(recipe_path)
    module = _module_name(path)
    flat: dict[str, Any] = {}
    header: dict[str, Any] = {"name": spec.name}
    prepared = prepares_data(spec)
    _put(header, "model", _model(spec.model, flat))
    if prepared:
        files = prepared_files(path, spec)
        if "test" in files:
            # TRL's grpo script concatenates every `datasets` entry into its one train split (get_dataset); only
            # `dataset_name` keeps splits: it loads the folder whole and takes train and eval by split name.
            flat["dataset_name"] = str(prepared_folder(path))
            flat["dataset_train_split"] = "train"
            flat["dataset_test_split"] = "test"
        else:
            flat["datasets"] = [{"path": "json", "data_files": files["train"]}]
        header["dataset"] = dataclasses.asdict(spec.dataset)  # the spec's own source, for import-trl
    else:
        _dataset(spec.dataset, flat)
        _put(header, "dataset", _dataset_header(spec.dataset))
    templated = prepared and bool(spec.model.chat_template)
    rewards_py = _rewards(spec, flat, path, own_trl=not templated)
    header["rewards"] = [_plain(dataclasses.asdict(r)) for r in spec.rewards]
    flat.update(spec.training)
    if spec.output_dir:
        flat["output_dir"] = spec.output_dir
    _put(header, "backend", _backend(spec.backend, flat))
    if spec.generation is not None:
        # What the backends' served config sets (launch/vllm_server.write_served_config): TRL's default host is
        # this machine's, the port is the spec's.
        served = {"use_vllm": True, "vllm_mode": "server"}
        if spec.generation.port != VLLM_DEFAULT_PORT:
            served["vllm_server_port"] = spec.generation.port
        added = [k for k, v in served.items() if spec.training.get(k) != v]
        flat.update(served)
        if added:
            header["exported_training"] = added
    if rewards_py is not None and "PYTHONPATH" not in flat.get("env", {}):
        # TRL imports a dotted reward from the working directory; `trl grpo` sets `env` before it starts the script.
        flat.setdefault("env", {})["PYTHONPATH"] = str(path.resolve().parent)
        header["exported_env"] = ["PYTHONPATH"]
    _header_rest(spec, header)
    script = prepare_script(spec, path) if needs_prepare(spec) else None
    prepare_name = f"{path.stem}_prepare.py"
    return Export(
        _text(spec, path, header, flat),
        rewards_py,
        module,
        commands(spec, path, prepare_name if script else None, rewards_py is not None),
        script,
        prepare_name,
    )


def _module_name(path: Path) -> str:
    """The importable name of the rewards module beside the recipe."""
    module = re.sub(r"\W+", "_", f"{path.stem}_rewards")
    return module if module[0].isalpha() else f"r_{module}"


def _put(header: dict[str, Any], key: str, value: dict[str, Any]) -> None:
    if value:
        header[key] = value


def _model(m: ModelSpec, flat: dict[str, Any]) -> dict[str, Any]:
    """Write the model's TRL keys (with LoRA and quantization) into `flat`; return what only the header can hold."""
    if m.name_or_path:
        flat["model_name_or_path"] = m.name_or_path
    if m.revision:
        flat["model_revision"] = m.revision
    flat["dtype"] = m.dtype
    if m.attn_implementation:
        flat["attn_implementation"] = m.attn_implementation
    if m.trust_remote_code:
        flat["trust_remote_code"] = True
    model_header = {k: getattr(m, k) for k in ("build_tiny", "chat_template") if getattr(m, k)}
    if m.lora is not None:
        flat["use_peft"] = True
        _keys(m.lora, trl_keys.LORA_KEYS, flat)
        if m.lora.bias != LoraSpec().bias:
            model_header["lora"] = dataclasses.asdict(m.lora)
    if m.quantization is not None:
        flat["load_in_4bit" if m.quantization.bits == 4 else "load_in_8bit"] = True
        _keys(m.quantization, trl_keys.QUANT_KEYS, flat)
    return model_header


def _keys(obj: Any, keys: dict[str, str], flat: dict[str, Any]) -> None:
    """Each TRL key of `keys` whose attribute of `obj` is set."""
    for key, name in keys.items():
        value = getattr(obj, name)
        if value is not None:
            flat[key] = value


def _dataset_header(d: DatasetSpec) -> dict[str, Any]:
    keys = ("prompt_column", "prompt_template", "system_prompt", "conversational", "eval_data_files", "revision")
    return {k: getattr(d, k) for k in keys if getattr(d, k) != getattr(DatasetSpec(), k)}


def _backend(b: BackendSpec, flat: dict[str, Any]) -> dict[str, Any]:
    """Write the backend's `trl` command keys into `flat`; return its other non-default settings."""
    if b.num_processes > 1:
        flat["num_processes"] = b.num_processes
    if b.accelerate_config:
        flat["accelerate_config"] = b.accelerate_config
    if b.env:
        flat["env"] = dict(b.env)
    return {
        k: v
        for k, v in dataclasses.asdict(b).items()
        if k not in ("num_processes", "accelerate_config", "env") and v != getattr(BackendSpec(), k)
    }


def _header_rest(spec: RunSpec, header: dict[str, Any]) -> None:
    """The generation, health and bookkeeping settings, which TRL has no key for."""
    if spec.generation is not None:
        header["generation"] = dataclasses.asdict(spec.generation)
    _put(header, "health", {k: v for k, v in dataclasses.asdict(spec.health).items() if v != getattr(HealthSpec(), k)})
    for key in ("description", "tags", "group"):
        if getattr(spec, key):
            header[key] = getattr(spec, key)
    if not spec.save_model:
        header["save_model"] = False


def _text(spec: RunSpec, path: Path, header: dict[str, Any], flat: dict[str, Any]) -> str:
    lines = [
        f"# Exported by grpo-dashboard from spec {spec.name!r}: run it with `trl grpo --config {path.name}`.",
        "# The next line holds what TRL has no key for; `python -m grpo_dashboard import-trl` reads it back.",
        HEADER + json.dumps(header, ensure_ascii=False, separators=(",", ":")),
    ]
    return (
        "\n".join(lines)
        + "\n"
        + yaml.dump(flat, Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False, width=1000)
    )


def _dataset(d: DatasetSpec, flat: dict[str, Any]) -> None:
    if d.mixture:
        flat["datasets"] = [dict(e) for e in d.mixture]
        if d.streaming:
            flat["streaming"] = True
        if d.test_split_size is not None:
            flat["test_split_size"] = d.test_split_size
        return
    if d.data_files:
        from grpo_dashboard.spec.jobfiles import job_module

        first = d.data_files if isinstance(d.data_files, str) else d.data_files[0]
        builder = job_module().DATA_FILE_TYPES.get(Path(first).suffix.lower(), "json")
        flat["datasets"] = [{"path": builder, "data_files": d.data_files}]
        return
    if d.path:
        flat["dataset_name"] = d.path
    if d.config:
        flat["dataset_config"] = d.config
    flat["dataset_train_split"] = d.split
    if d.eval_split:
        flat["dataset_test_split"] = d.eval_split
    if d.streaming:
        flat["dataset_streaming"] = True


def _rewards(spec: RunSpec, flat: dict[str, Any], path: Path, own_trl: bool = True) -> str | None:
    """`reward_funcs` / `reward_weights` into `flat`; the generated module's text (None without one). `own_trl`:
    TRL's own rewards by name (they read conversational completions: not for prompts prepared as templated text)."""
    module = _module_name(path)
    funcs: list[str] = []
    generated: dict[str, dict[str, Any]] = {}
    for i, r in enumerate(spec.rewards):
        if r.model:
            if i != 0 or "reward_model_name_or_path" in flat:
                raise SpecError(
                    [
                        FieldError(
                            f"rewards[{i}].model",
                            r.model,
                            "cannot be exported: TRL's grpo script "
                            "takes one reward model (reward_model_name_or_path), scored first. Move "
                            "it to the first entry, or keep only one.",
                        )
                    ]
                )
            flat["reward_model_name_or_path"] = r.model
            continue
        trl = _trl_name(r) if own_trl else None
        if trl:
            funcs.append(trl)
            continue
        attr = re.sub(r"\W+", "_", r.name)
        attr = attr if attr[:1].isalpha() else f"r_{attr}"
        while attr in generated:
            attr += "_"
        generated[attr] = _plain(dataclasses.asdict(r))
        funcs.append(f"{module}.{attr}")
    if funcs:
        flat["reward_funcs"] = funcs
    if spec.rewards:
        flat["reward_weights"] = [r.weight for r in spec.rewards]
    if not generated:
        return None
    return (
        f"{GENERATED}: the rewards of spec {spec.name!r} for `trl grpo` (edit the spec, not this file).\n"
        f'"""Each name is one reward of the spec, built by the dashboard\'s job module grpo_rewards.py."""\n\n'
        "import sys\nfrom pathlib import Path\n\n"
        f"{job_path_lines(path)}"
        "import grpo_rewards  # noqa: E402\n\n"
        f"REWARD_SPECS = {generated!r}\n"
        "for _attr, _r in REWARD_SPECS.items():\n"
        "    globals()[_attr] = grpo_rewards.build_reward(_r['name'], _r.get('builtin'), _r.get('function'),\n"
        "                                                 _r.get('params') or {})\n"
    )


def _plain(d: dict[str, Any]) -> dict[str, Any]:
    defaults = dataclasses.asdict(RewardSpec())
    return {k: v for k, v in d.items() if k == "name" or v != defaults.get(k)}


def commands(spec: RunSpec, recipe: Path, prepare: str | None = None, rewards_module: bool = False) -> dict[str, str]:
    """The equivalent command lines: `trl grpo` and `accelerate launch` of TRL's script (the HF Jobs ones, which
    upload our job's files, come from launch/hf_jobs/export.py); first the prepare script when there is one."""
    from grpo_dashboard.spec import trl_schema

    b = spec.backend
    trl_dir = trl_schema.trl_dir() or Path("trl")  # found without importing trl; a stand-in where it is missing
    script = trl_dir / "scripts" / "grpo.py"
    launch = ["accelerate", "launch"]
    if b.num_processes > 1:
        launch += ["--num_processes", str(b.num_processes)]
    if b.accelerate_config:
        from grpo_dashboard.spec.run_spec import ACCELERATE_CONFIGS

        cfg = (
            trl_dir / "accelerate_configs" / f"{b.accelerate_config}.yaml"
            if b.accelerate_config in ACCELERATE_CONFIGS
            else Path(b.accelerate_config)
        )
        launch += ["--config_file", str(cfg)]
    out = {"prepare": shlex.join(["python", str(recipe.parent / prepare)])} if prepare else {}
    accelerate = shlex.join([*launch, str(script), "--config", str(recipe)])
    if rewards_module:  # `accelerate launch` starts the script with the environment as it is: the module's folder
        accelerate = f"PYTHONPATH={shlex.quote(str(recipe.resolve().parent))} {accelerate}"
    trl = f"trl grpo --config {shlex.quote(str(recipe))}"
    g = spec.generation
    if g is not None:
        # Server mode: TRL's training only connects to a server; the backends start `trl vllm-serve` first and
        # give the two their own GPUs, so whoever runs the export by hand must do the same.
        serve = shlex.join(["trl", *serve_command(spec)[1:]])
        if g.server_gpus:
            gpus = ",".join(str(i) for i in training_gpus(spec, None) or [])
            out["vllm"] = f"CUDA_VISIBLE_DEVICES={','.join(str(i) for i in g.server_gpus)} {serve} &"
            trl, accelerate = f"CUDA_VISIBLE_DEVICES={gpus} {trl}", f"CUDA_VISIBLE_DEVICES={gpus} {accelerate}"
        else:
            out["vllm"] = f"{serve}  # on the server node; then set vllm_server_host to its address"
    return {**out, "trl": trl, "accelerate": accelerate}


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True
