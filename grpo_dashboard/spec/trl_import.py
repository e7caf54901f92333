"""Import a flat TRL config (`trl grpo --config`, open-r1, Unsloth or paper recipes) as a run spec.

The file is parsed by TRL's own parser (`TrlParser` over `GRPOScriptArguments`, `GRPOConfig`, `ModelConfig` and
`DatasetMixtureConfig`, a fresh one per file: it keeps the defaults it was given). Every key is then mapped to the
spec, and each step is one row of the mapping table: mapped as it is, converted (renamed keys, open-r1's reward
names, dotted reward paths, `vllm_device`), pinned (a default of the recipe's TRL version that 1.16 changed, written
out explicitly), dropped (TRL 1.16 no longer has it), unsupported (with the reason) or ignored (a key neither TRL nor
a known recipe format has, e.g. a fork's own script arguments: `trl grpo` ignores them too; `strict` refuses them,
every one in one error). A weighted reward that cannot be reproduced is an error naming it, unless `allow_drop`.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grpo_dashboard.errors import FieldError, SpecError
from grpo_dashboard.spec import trl_fields, trl_import_infer, trl_keys
from grpo_dashboard.spec.file_policy import files_for_check
from grpo_dashboard.spec.run_spec import LoraSpec, QuantizationSpec, RewardSpec, RunSpec
from grpo_dashboard.spec.trl_import_result import ImportResult, Row
from grpo_dashboard.spec.trl_isolated import TrlParse, fields_of, parse_here
from grpo_dashboard.spec.trl_parse import Recipe, recipe_from_file
from grpo_dashboard.spec.trl_rewards import (
    OPEN_R1_CODE_LANGUAGES,
    OPEN_R1_REWARDS,
    TRL_REWARDS,
    map_reward,
    reward_name,
)
from grpo_dashboard.spec.trl_versions import LATEST, TRL_DEFAULTS, infer_version, pin_defaults


# --- mapping --------------------------------------------------------------------------------------------------
def import_trl(
    path: str | Path,
    trl_version: str | None = None,
    name: str | None = None,
    overrides: dict[str, Any] | None = None,
    parse: Callable[[dict[str, Any], dict[str, Any]], TrlParse] | None = None,
    strict: bool = False,
    allow_drop: bool = False,
) -> ImportResult:
    """Parse a flat TRL config file with TRL's parser and map it to a run spec (SpecError naming the key when it
    cannot). `overrides`: what the recipe lacks, e.g. {"model": "Qwen/...", "dataset": "owner/data", "rewards": [..]};
    `parse`, `strict`, `allow_drop`: as for `import_recipe`.
    """
    return import_recipe(recipe_from_file(path), trl_version, name, overrides, parse, strict, allow_drop)


def import_recipe(
    recipe: Recipe,
    trl_version: str | None = None,
    name: str | None = None,
    overrides: dict[str, Any] | None = None,
    parse: Callable[[dict[str, Any], dict[str, Any]], TrlParse] | None = None,
    strict: bool = False,
    allow_drop: bool = False,
) -> ImportResult:
    """import_trl for a Recipe (a file, pasted text or an upload): the files it names are refused on a Space and
    read with a size budget locally, before TRL's parser and checks run on it: `parse` (the dashboard passes
    checks.trl_check.parse_isolated for a visitor's recipe), by default in this process.

    Keys no known format has are ignored rows, as `trl grpo` ignores them (`strict`: refused, all in one error); a
    reward with a non-zero weight that cannot be reproduced is an error naming it (`allow_drop`: a dropped row)."""
    config, header = recipe.config, recipe.header
    if trl_version is not None and trl_version not in TRL_DEFAULTS:
        raise SpecError(
            [
                FieldError(
                    "--trl-version",
                    trl_version,
                    f"must be one of {', '.join(TRL_DEFAULTS)} (the releases whose changed defaults are known).",
                )
            ]
        )
    # TRL's parser stops at the first value it cannot read: those are reported with every other problem instead.
    bad_values = trl_fields.value_errors(config)
    if bad_values:
        config = {k: v for k, v in config.items() if k not in {e.field for e in bad_values}}
        recipe = dataclasses.replace(recipe, config=config)
    inline = files_for_check(config, recipe.on_space, recipe.base_dir)
    version, reason = (trl_version, "given with --trl-version") if trl_version else infer_version(config)
    parsed = (parse or parse_here)(config, inline)
    values, unknown, check = parsed.values, parsed.unknown, parsed.check
    m = _Mapper(recipe, values, fields_of(parsed))
    m.allow_drop = allow_drop
    m.strange = [
        k
        for k in unknown
        if k not in trl_keys.FOREIGN
        and k not in trl_keys.UNSUPPORTED
        and k not in trl_keys.REWARD_PARAM_KEYS
        and k not in trl_keys.LAUNCH_KEYS
    ]
    refused = bad_values + ([m.unknown_key_error(k, strict=True) for k in m.strange] if strict else [])
    m.run(unknown, overrides or {})
    m.pin_defaults(version)
    header_row = trl_import_infer.apply_header(m.spec, header)
    if header_row is not None:
        m.rows.append(header_row)
    if name:
        m.spec.name = name
    elif not m.spec.name:
        m.spec.name = re.sub(r"[^A-Za-z0-9_.-]+", "-", recipe.stem).strip("-") or "imported"
    if not header:
        inferred = (
            trl_import_infer.infer_processes(m.spec, m.effective, m.config),
            trl_import_infer.infer_server(m.spec, m.effective, m.config.get("vllm_device")),
            trl_import_infer.infer_open_r1_chat(m.spec, m.open_r1()),
        )
        m.rows.extend(r for r in inferred if r is not None)
    if refused or m.errors:
        raise SpecError(refused + m.errors)
    return ImportResult(m.spec, m.rows, version, reason, check)


class _Mapper:
    def __init__(self, recipe: Recipe, values: dict[str, Any], fields: dict[str, Any]) -> None:
        self.recipe, self.config, self.values, self.header = recipe, recipe.config, values, recipe.header
        self.path = recipe.label  # how messages name the recipe: an upload by its own name, never a server path
        self.fields = fields  # GRPOConfig's, from TRL's subprocess
        self.spec = RunSpec()
        self.rows: list[Row] = []
        self.errors: list[FieldError] = []
        self.reward_params: dict[str, dict[str, Any]] = {}
        self._kept: list[bool] = []  # per reward_funcs entry: whether it became a spec reward (for its weight)
        self._extra: list[str] = []  # rewards given on the command line (--reward)
        self.strange: list[str] = []  # keys of no known format: ignored rows (as `trl grpo` ignores them)
        self.allow_drop = False

    def row(self, key: str, action: str, target: str | None, note: str = "") -> None:
        self.rows.append(Row(key, self.config.get(key), action, target, note))

    def unknown_key_error(self, key: str, strict: bool = False) -> FieldError:
        known = [*self.fields, *trl_keys.MODEL_KEYS, *trl_keys.LORA_KEYS, *trl_keys.DATASET_KEYS, *trl_keys.FOREIGN]
        close = difflib.get_close_matches(key, known, n=2)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        what = (
            f"is not a key of TRL {LATEST} (GRPOConfig, ModelConfig, the "
            f"grpo script's arguments) nor of a recipe format this importer knows (open-r1, Unsloth).{hint}"
        )
        if strict:
            return FieldError(
                key,
                self.config.get(key),
                f"{what} Fix or remove it in {self.path}, or import without --strict to ignore it as `trl grpo` "
                "does; nothing was written.",
            )
        return FieldError(key, self.config.get(key), what)

    # Each known key goes to one place; the order of the table follows the file.
    def run(self, unknown: list[str], overrides: dict[str, Any]) -> None:
        self._extra = [str(x) for x in overrides.get("rewards") or []]
        lora: dict[str, Any] = {}
        for key in self.config:
            self._key(key, unknown, lora)
        self._lora(lora)
        self._rewards(overrides)
        self._overrides(overrides)
        if self._eval_on() and self.spec.dataset.eval_split is None and not self.spec.dataset.mixture:
            self.spec.dataset.eval_split = "test"
            self.rows.append(
                Row(
                    "(dataset_test_split)",
                    "test",
                    "converted",
                    "dataset.eval_split",
                    "TRL's default test split: the recipe evaluates (eval_strategy/do_eval)",
                )
            )

    def _key(self, key: str, unknown: list[str], lora: dict[str, Any]) -> None:
        """One key of the file: launch and foreign keys, then the model's, LoRA's, the dataset's, quantization's."""
        s, v = self.spec, self.values
        if key == "env":
            env = self.config["env"]
            if isinstance(env, dict):
                s.backend.env.update({str(k): str(x) for k, x in env.items()})
            self.row(key, "mapped", "backend.env")
        elif key in self.strange:
            note = self.unknown_key_error(key).message.removeprefix("is ")
            self.row(key, "ignored", None, f"{note} `trl grpo` ignores it too (your script's own argument?)")
        elif key in unknown:
            self._foreign(key)
        elif key in trl_keys.MODEL_KEYS:
            target = trl_keys.MODEL_KEYS[key]
            value = None if key == "model_revision" and v[key] == "main" else v[key]
            setattr(s.model, target.split(".")[1], value)
            self.row(key, "mapped", target)
        elif key in trl_keys.LORA_KEYS:
            lora[trl_keys.LORA_KEYS[key]] = v[key]
            self.row(key, "mapped", f"model.lora.{trl_keys.LORA_KEYS[key]}")
        elif key in trl_keys.DATASET_KEYS:
            self._dataset(key, v[key])
        elif key in trl_keys.QUANT_KEYS or key in ("load_in_4bit", "load_in_8bit"):
            self._quant(key, v[key])
        else:
            self._other_key(key)

    def _other_key(self, key: str) -> None:
        """A key of the grpo script or GRPOConfig (the reward keys wait for `_rewards`: they depend on each other)."""
        v = self.values
        if key == "use_peft":
            self.row(key, "mapped", "model.lora", "LoRA on" if v[key] else "LoRA off")
        elif key == "output_dir":
            self.spec.output_dir = str(v[key])
            self.row(key, "mapped", "output_dir")
        elif key in ("reward_funcs", "reward_model_name_or_path", "reward_weights"):
            pass
        elif key == "ignore_bias_buffers":
            self.row(key, "dropped", None, "a DDP debug switch of TRL's scripts that the grpo script never reads")
        elif key == "logging_nan_inf_filter":
            self.row(key, "dropped", None, "the job always sets it to false so NaN/Inf losses reach the dashboard")
        elif key in self.fields:
            value = v[key]
            if key == "scale_rewards" and isinstance(value, bool):
                value = "group" if value else "none"
                self.row(key, "converted", f"training.{key}", f"TRL ≥ 0.20 names {self.config[key]!r} {value!r}")
            else:
                self.row(key, "mapped", f"training.{key}")
            self.spec.training[key] = value

    def _lora(self, lora: dict[str, Any]) -> None:
        """LoRA when use_peft is on (by the file or TRL's default); otherwise its keys are dropped rows."""
        v = self.values
        if v.get("use_peft") or (self.config.get("use_peft") and "use_peft" not in v):
            self.spec.model.lora = LoraSpec(**{"target_modules": None, **lora})
        elif lora:
            for r in self.rows:
                if r.target and r.target.startswith("model.lora."):
                    r.action, r.note = "dropped", "use_peft is off, so TRL ignores the LoRA keys"

    def _overrides(self, overrides: dict[str, Any]) -> None:
        """What the command line gives that the recipe lacks: the model, the dataset and its config."""
        s = self.spec
        if overrides.get("model"):
            s.model.name_or_path = str(overrides["model"])
            self.rows.append(
                Row(
                    "(--model)",
                    overrides["model"],
                    "mapped",
                    "model.name_or_path",
                    "given on the command line: the recipe names no model",
                )
            )
        if overrides.get("dataset"):
            s.dataset.path = str(overrides["dataset"])
            self.rows.append(
                Row(
                    "(--dataset)",
                    overrides["dataset"],
                    "mapped",
                    "dataset.path",
                    "given on the command line: the recipe names no dataset",
                )
            )
        if overrides.get("dataset_config"):
            s.dataset.config = str(overrides["dataset_config"])

    def _eval_on(self) -> bool:
        t = self.spec.training
        return str(t.get("eval_strategy", "no")) != "no"

    def _dataset(self, key: str, value: Any) -> None:
        d = self.spec.dataset
        target = trl_keys.DATASET_KEYS[key]
        if key == "datasets":
            entries = [
                dataclasses.asdict(x) if dataclasses.is_dataclass(x) and not isinstance(x, type) else dict(x)
                for x in (value or [])
            ]
            entries = [
                {k: x for k, x in e.items() if x is not None and not (k == "split" and x == "train")} for e in entries
            ]
            single = entries[0] if len(entries) == 1 else None
            if (
                single
                and single.get("path") in ("json", "csv", "parquet")
                and single.get("data_files")
                and set(single) <= {"path", "data_files"}
            ):
                d.data_files = single["data_files"]
                self.row(key, "converted", "dataset.data_files", f"one local {single['path']} dataset")
                return
            d.mixture = entries or None
        elif key == "dataset_test_split":
            d.eval_split = value
        else:
            setattr(d, target, value)
        self.row(key, "mapped", f"dataset.{target}")

    def _quant(self, key: str, value: Any) -> None:
        m = self.spec.model
        if key in ("load_in_4bit", "load_in_8bit"):
            if value:
                m.quantization = m.quantization or QuantizationSpec()
                m.quantization.bits = 4 if key == "load_in_4bit" else 8
            self.row(key, "mapped", "model.quantization.bits", "QLoRA through bitsandbytes" if value else "off")
            return
        q = m.quantization
        if q is None:
            m.quantization = q = QuantizationSpec()
        setattr(q, trl_keys.QUANT_KEYS[key], value)
        self.row(key, "mapped", f"model.quantization.{trl_keys.QUANT_KEYS[key]}")

    def _foreign(self, key: str) -> None:
        value = self.config[key]
        s = self.spec
        if key in trl_keys.LAUNCH_KEYS:
            if key == "num_processes":
                s.backend.num_processes = int(value)
            else:
                s.backend.accelerate_config = str(value)
            self.row(key, "mapped", trl_keys.LAUNCH_KEYS[key], "a `trl` command key (accelerate launch)")
            return
        if key in trl_keys.UNSUPPORTED:
            self.row(key, "unsupported", None, trl_keys.UNSUPPORTED[key])
            return
        if key in trl_keys.REWARD_PARAM_KEYS:
            reward, param = trl_keys.REWARD_PARAM_KEYS[key]
            if key == "code_language" and value not in OPEN_R1_CODE_LANGUAGES:
                self.errors.append(
                    FieldError(
                        key,
                        value,
                        f"is not one of open-r1's code languages "
                        f"({', '.join(OPEN_R1_CODE_LANGUAGES)}). Fix it in {self.path}; "
                        "nothing was written.",
                    )
                )
                return
            self.reward_params.setdefault(reward, {})[param] = value
            used = reward in self._reward_names()
            self.row(
                key,
                "converted" if used else "dropped",
                f"rewards[{reward}].params.{param}" if used else None,
                f"open-r1's parameter of its {reward!r} reward" + ("" if used else ", which the recipe does not use"),
            )
            return
        target, how = trl_keys.FOREIGN[key]
        if target is None:
            self.row(key, "dropped", None, how)
            return
        if key == "dataset_mixture":
            self._open_r1_mixture(value)
            return
        if key == "vllm_device":
            s.training["vllm_mode"] = "server"
            self.row(key, "converted", target, f"{how}; vllm_device was {value!r}")
            return
        if key == "use_gradient_checkpointing":
            value = value in (True, "unsloth", "true", "True")
        if key == "gpu_memory_utilization":
            s.training["vllm_mode"] = "colocate"
            how += "; Unsloth runs vLLM inside the training process (vllm_mode: colocate)"
        if key == "warmup_ratio":
            value = float(value)
        if key == "torch_dtype" and value not in ("auto", "float32", "float16", "bfloat16"):
            value = str(value).replace("torch.", "")
        section, _, rest = target.partition(".")
        if section == "training":
            s.training[rest] = value
        elif section == "backend":
            s.backend.env[rest.split(".", 1)[1]] = str(value)
        else:
            setattr(getattr(s, section), rest, value)
        self.row(key, "converted", target, how)

    def _open_r1_mixture(self, value: Any) -> None:
        """open-r1's `dataset_mixture` (its ScriptArguments) as `dataset.mixture` entries of TRL's DatasetConfig."""
        entries = value.get("datasets") if isinstance(value, dict) else None
        if (
            not isinstance(entries, list)
            or not entries
            or not all(isinstance(e, dict) and e.get("id") for e in entries)
        ):
            self.errors.append(
                FieldError(
                    "dataset_mixture",
                    value,
                    "must be open-r1's mapping {datasets: [{id, "
                    "config, split, columns, weight}, ...], seed, test_split_size}, every "
                    f"dataset with an `id`. Fix it in {self.path}; nothing was written.",
                )
            )
            return
        d = self.spec.dataset
        d.mixture = [
            {
                k: v
                for k, v in (("path", e["id"]), ("name", e.get("config")), ("columns", e.get("columns")))
                if v is not None
            }
            | ({"split": e["split"]} if e.get("split", "train") != "train" else {})
            for e in entries
        ]
        d.test_split_size = value.get("test_split_size")
        weights = [e.get("weight") for e in entries]
        note = trl_keys.FOREIGN["dataset_mixture"][1]
        if any(w not in (None, 1, 1.0) for w in weights):
            note += (
                f"; open-r1's weights {weights} take that share of each dataset's own rows, which TRL's "
                "`fraction` (shares of the mixture) cannot express: every row is used. Set "
                "dataset.mixture[*].fraction for TRL's shares"
            )
        if value.get("seed") not in (None, 0):
            note += f"; open-r1's shuffle seed {value['seed']} is not kept (the trainer shuffles with training.seed)"
        self.row("dataset_mixture", "converted", "dataset.mixture", note)

    def _rewards(self, overrides: dict[str, Any]) -> None:
        v, s = self.values, self.spec
        names = list(v.get("reward_funcs") or [])
        if isinstance(v.get("reward_funcs"), str):
            names = [v["reward_funcs"]]
        rewards: list[RewardSpec] = []
        if v.get("reward_model_name_or_path"):
            model = str(v["reward_model_name_or_path"])
            rewards.append(RewardSpec(name=reward_name(model.rstrip("/").split("/")[-1]), model=model))
            self.row("reward_model_name_or_path", "mapped", "rewards[0].model", "TRL puts the reward model first")
        extra = [str(x) for x in overrides.get("rewards") or []]
        for i, fn in enumerate([*names, *extra]):
            given = i >= len(names)
            reward = self._reward(str(fn), given)
            if reward is not None:
                rewards.append(reward)
        weights = v.get("reward_weights")
        self._refuse_drops(names, weights)
        if weights is not None:
            # TRL's order: the reward model first, then reward_funcs (entries that became no reward keep no weight).
            keep = [True] * (1 if v.get("reward_model_name_or_path") else 0) + self._kept
            kept = [w for w, k in zip(weights, keep, strict=False) if k]
            for r, w in zip(rewards, kept, strict=False):
                r.weight = float(w)
            self.row("reward_weights", "mapped", "rewards[*].weight", "one weight per reward entry")
        s.rewards = rewards

    def _refuse_drops(self, names: list[Any], weights: list[Any] | None) -> None:
        """A reward_funcs entry with a non-zero weight that became no reward: an error, or with allow_drop a row."""
        first = 1 if self.values.get("reward_model_name_or_path") else 0  # TRL weighs the reward model first
        for i, (fn, kept) in enumerate(zip(names, self._kept, strict=False), start=first):
            weight = weights[i] if weights is not None and i < len(weights) else 1.0
            if kept or not weight:
                continue
            row = next(
                (
                    r
                    for r in self.rows
                    if r.key == "reward_funcs" and str(r.value) == str(fn) and r.action == "unsupported"
                ),
                None,
            )
            if row is None:  # an unknown name: already an error of its own
                continue
            if self.allow_drop:
                row.action, row.note = "dropped", f"{row.note}; dropped with --allow-drop (its weight was {weight})"
                continue
            self.errors.append(
                FieldError(
                    "reward_funcs",
                    fn,
                    f"is a reward of weight {weight} that cannot be reproduced ({row.note}). Importing "
                    "without it would train a different run: give a replacement with --reward, import with "
                    "--allow-drop to go on without it, or remove it from the recipe; nothing was written.",
                )
            )

    def _reward(self, fn: str, given: bool) -> RewardSpec | None:
        m = map_reward(fn, "(--reward)" if given else "reward_funcs", self.recipe, self.reward_params)
        self._kept.append(m.kept)
        if m.row is not None:
            self.rows.append(m.row)
        if m.error is not None:
            self.errors.append(m.error)
        return m.reward

    def _reward_names(self) -> set[str]:
        """The reward names the recipe lists (reward_funcs), as strings."""
        funcs = self.values.get("reward_funcs") or []
        return {str(f) for f in [*([funcs] if isinstance(funcs, str) else funcs), *self._extra]}

    def effective(self, key: str) -> Any:
        """The value a training field will have: the spec's, else TRL's default."""
        t = self.spec.training
        return t[key] if key in t else self.fields[key].default

    def pin_defaults(self, version: str) -> None:
        self.rows.extend(Row(*r) for r in pin_defaults(self.spec.training, self.fields, version))

    def open_r1(self) -> bool:
        """Whether the recipe is open-r1's: a key or reward name only open-r1 has."""
        keys = set(trl_keys.REWARD_PARAM_KEYS) | set(trl_keys.OPEN_R1_KEYS)
        names = self._reward_names() - set(TRL_REWARDS)
        return bool(keys & set(self.config)) or bool(names & set(OPEN_R1_REWARDS))
