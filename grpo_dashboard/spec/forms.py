"""The new-run form as data, without gradio: fields generated from the RunSpec dataclasses and TRL's GRPOConfig
(types, defaults, help text, choices), and the conversions form values <-> RunSpec <-> YAML.

Defaults are never re-typed: spec fields show the dataclass default, training fields TRL's default. Training values
equal to TRL's default are only written to `training:` when the base spec already had them (the user set them).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
import types
import typing
from dataclasses import dataclass
from typing import Any

from grpo_dashboard.errors import FieldError, SpecError, short_repr
from grpo_dashboard.spec import safe_yaml, trl_fields
from grpo_dashboard.spec.form_layout import (
    CUSTOM_ALLOWED,
    SPEC_GROUPS,
    SPEC_HELP,
    SWITCHES,
    TEXT_FIELDS,
    TOGGLED_SECTIONS,
    TOP_LEVEL,
    TRAINING_GROUPS,
    YAML_ONLY,
    spec_choices,
)
from grpo_dashboard.spec.run_spec import RewardSpec, RunSpec

GROUPS = (
    "Run",
    "Model",
    "Data",
    "Rewards",
    "Agent",
    "GRPO core",
    "Generation / vLLM",
    "Logging & eval",
    "Backend & hardware",
)
UNSET = "unset"  # the choice that leaves an optional value to its default
REWARD_COLUMNS = ("name", "weight", "builtin", "function", "params")


@dataclass(frozen=True)
class FormField:
    """One input of the new-run form.

    `widget` is one of: text, int, float, bool, choice, list (comma-separated), toggle (an optional nested
    section such as LoRA, on or off), switch (several training fields at once, `form_layout.SWITCHES`), rewards
    (the reward table). `item` is the element type of list fields.
    """

    key: str
    group: str
    label: str
    widget: str
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    nullable: bool = False
    custom: bool = False
    item: type | None = None
    types: tuple[Any, ...] = ()

    @property
    def is_training(self) -> bool:
        """True for GRPOConfig fields (stored under `training:`)."""
        return self.key.startswith("training.")

    @property
    def number_as_text(self) -> bool:
        """A number that may be unset: edited as text, since an empty number input reads back as 0 in the browser."""
        return self.widget in ("int", "float") and self.nullable


def _flat(annotation: Any) -> tuple[Any, ...]:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return tuple(a for arg in typing.get_args(annotation) for a in _flat(arg))
    origin = typing.get_origin(annotation)
    return (origin if origin is not None else annotation,)


def _widget(kinds: tuple[Any, ...], choices: tuple[Any, ...] | None) -> str:
    real = [k for k in kinds if k is not type(None)]
    if choices is not None:
        return "choice"
    if list in real:
        return "list"
    if real == [bool]:
        return "bool" if type(None) not in kinds else "choice"
    if dict in real:
        return "json"
    if real and all(k in (int, float) for k in real):
        return "int" if real == [int] else "float"
    return "text"


def _item_type(annotation: Any) -> type | None:
    for arg in typing.get_args(annotation) if typing.get_origin(annotation) is not list else (annotation,):
        if typing.get_origin(arg) is list:
            (item,) = typing.get_args(arg)
            return item
    return None


def short_help(text: str, limit: int = 240) -> str:
    """The first sentences of a help text, up to about `limit` characters."""
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) <= limit:
        return text
    cut = text.rfind(". ", 0, limit)
    return text[: cut + 1] if cut > 40 else text[:limit].rsplit(" ", 1)[0] + "…"


def _spec_fields(group: str, prefix: str, cls: type) -> list[FormField]:
    out: list[FormField] = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = f"{prefix}.{f.name}" if prefix else f.name
        kinds = _flat(hints[f.name])
        nested = [k for k in kinds if isinstance(k, type) and dataclasses.is_dataclass(k)]
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else (f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        )
        if nested:
            out.append(FormField(key, group, f"use {f.name}", "toggle", default is not None, SPEC_HELP.get(key, "")))
            out.extend(_spec_fields(group, key, nested[0]))
            continue
        choices = spec_choices(key)
        widget = "text" if key in TEXT_FIELDS else _widget(kinds, choices)
        if widget == "json" or key in YAML_ONLY:
            continue
        help_text = str(f.metadata.get("help") or SPEC_HELP.get(key, ""))
        out.append(
            FormField(
                key,
                group,
                f.name,
                widget,
                default,
                help_text,
                choices,
                type(None) in kinds,
                key in CUSTOM_ALLOWED,
                _item_type(hints[f.name]),
                kinds,
            )
        )
    return out


def form_fields() -> list[FormField]:
    """Every field of the form in display order (imports TRL on first use)."""
    trl = trl_fields.grpo_fields()
    hints = typing.get_type_hints(RunSpec)
    top = {f.name: f for f in dataclasses.fields(RunSpec)}
    out: list[FormField] = []
    for group in GROUPS:
        for name in TOP_LEVEL.get(group, ()):
            f = top[name]
            kinds = _flat(hints[name])
            out.append(
                FormField(
                    name,
                    group,
                    name,
                    _widget(kinds, None),
                    f.default,
                    SPEC_HELP.get(name, ""),
                    nullable=type(None) in kinds,
                )
            )
        for prefix, cls in SPEC_GROUPS.get(group, ()):
            if prefix in TOGGLED_SECTIONS:
                out.append(FormField(prefix, group, f"use {prefix}", "toggle", False, SPEC_HELP.get(prefix, "")))
            out.extend(_spec_fields(group, prefix, cls))
        if group == "Rewards":
            out.append(
                FormField(
                    "rewards",
                    group,
                    "reward functions",
                    "rewards",
                    [],
                    "One row per reward function: "
                    "a built-in `name` (or `builtin` + a unique name, or `function` = file.py:func), "
                    "its `weight`, and `params` as JSON.",
                )
            )
        for sw in (sw for sw in SWITCHES if sw.group == group and all(n in trl for n in (*sw.on, *sw.off))):
            out.append(FormField(sw.key, group, sw.key, "switch", False, sw.help))
        for name in TRAINING_GROUPS.get(group, ()):
            if name not in trl or name in trl_fields.RESERVED:
                continue
            tf = trl[name]
            out.append(
                FormField(
                    f"training.{name}",
                    group,
                    name,
                    _widget(tf.types, tf.choices),
                    tf.default,
                    short_help(tf.help),
                    tf.choices,
                    type(None) in tf.types,
                    types=tf.types,
                )
            )
    return out


def fields_by_key() -> dict[str, FormField]:
    """form_fields() keyed by field key."""
    return {f.key: f for f in form_fields()}


# --- value encoding ---------------------------------------------------------------------------------------------
def choice_label(value: Any) -> str:
    """How a choice value appears in a dropdown (bools as true/false, None as `unset`)."""
    if value is None:
        return UNSET
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def choice_options(field: FormField) -> list[str]:
    """Dropdown options of a choice field."""
    choices = list(field.choices or ())
    if field.widget == "choice" and not choices:  # bool | None
        choices = [True, False]
    labels = [choice_label(c) for c in choices]
    if (field.nullable or field.default is None) and UNSET not in labels:
        labels.insert(0, UNSET)
    return labels


def _to_widget(field: FormField, value: Any) -> Any:
    w = field.widget
    if w == "choice":
        return choice_label(value)
    if w == "list":
        if value is None:
            return ""
        return ", ".join(str(v) for v in value) if isinstance(value, list) else str(value)
    if w == "text":
        if isinstance(value, dict):  # a mapping in a text field (TEXT_FIELDS): flow YAML, read back by the spec
            return "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"
        return "" if value is None else str(value)
    if w == "bool":
        return bool(value)
    if w in ("int", "float"):
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                return "" if field.number_as_text else None
        if field.number_as_text:
            return "" if value is None else _number_text(value)
        return value
    return value


def _number_text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


def reward_rows(rewards: list[RewardSpec]) -> list[list[Any]]:
    """The reward table rows for a list of rewards (params as JSON)."""
    return [
        [r.name, r.weight, r.builtin or "", r.function or "", json.dumps(r.params) if r.params else ""]
        for r in rewards
    ]


_ABSENT = object()


def _get(spec: RunSpec, key: str) -> Any:
    """The value at a dotted key; _ABSENT when a parent section is None (e.g. LoRA off)."""
    obj: Any = spec
    for part in key.split("."):
        if obj is None:
            return _ABSENT
        obj = getattr(obj, part)
    return obj


def switch_on(training: dict[str, Any], key: str) -> bool:
    """Whether a switch (`form_layout.SWITCHES`) shows as on for these training values: each of its fields has its
    `on` value (TRL's default counts), and the fields it takes as they are are set."""
    sw = next(s for s in SWITCHES if s.key == key)
    return all(
        name in training if value is None else trl_fields.effective(training, name) == value
        for name, value in sw.on.items()
    )


def _apply_switch(training: dict[str, Any], key: str, on: bool) -> None:
    sw = next(s for s in SWITCHES if s.key == key)
    for name, value in (sw.on if on else sw.off).items():
        if value is not None:
            training[name] = value
        elif on:
            training.setdefault(name, trl_fields.default(name))
        else:
            training.pop(name, None)


def values_from_spec(spec: RunSpec) -> dict[str, Any]:
    """Widget values for every form field: the spec's values, TRL defaults for training fields it leaves unset."""
    out: dict[str, Any] = {}
    for f in form_fields():
        if f.widget == "switch":
            out[f.key] = switch_on(spec.training, f.key)
        elif f.widget == "rewards":
            out[f.key] = reward_rows(spec.rewards)
        elif f.is_training:
            out[f.key] = _to_widget(f, trl_fields.effective(spec.training, f.key[len("training.") :]))
        elif f.widget == "toggle":
            out[f.key] = _get(spec, f.key) is not None
        else:
            value = _get(spec, f.key)
            out[f.key] = _to_widget(f, f.default if value is _ABSENT else value)
    return out


def unshowable(text: str) -> list[FieldError]:
    """Number fields whose YAML value is not a number (`beta: 0.0 [unclosed` reads as text): the form would show
    them blank, so they are reported instead, naming the field and the value."""
    spec = RunSpec.from_yaml(text)
    out = []
    for f in form_fields():
        if f.widget in ("int", "float") and f.is_training:
            value = spec.training.get(f.key[len("training.") :])
            if isinstance(value, str):
                try:
                    float(value)
                except ValueError:
                    out.append(
                        FieldError(
                            f.key,
                            value,
                            f"is not a number; write a {f.widget} such as "
                            f"{f.default if f.default is not None else 1}, or delete the line.",
                        )
                    )
    return out


def values_from_yaml(text: str) -> dict[str, Any]:
    """Widget values from YAML text; raises SpecError for structural problems."""
    return values_from_spec(RunSpec.from_yaml(text))


def _from_choice(field: FormField, label: Any) -> Any:
    for c in list(field.choices or ()) + [True, False, None]:
        if choice_label(c) == str(label):
            return c
    # A value no option shows (the YAML's `loss_type: foo`) is kept as it is: validation then reports it on its field
    # with what is allowed, instead of a form edit dropping it from the YAML unseen.
    return label if label not in ("", None) else None


def _number(field: FormField, value: Any) -> Any:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    num = float(value)
    if math.isnan(num):
        return None
    int_like = field.widget == "int" or isinstance(field.default, int) and not isinstance(field.default, bool)
    return int(num) if int_like and num.is_integer() else num


def _parse(field: FormField, value: Any) -> Any:
    w = field.widget
    if w == "choice":
        return _from_choice(field, value)
    if w == "bool":
        return bool(value)
    if w in ("int", "float"):
        try:
            return _number(field, value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"must be a number, got {short_repr(value)}.") from exc
    text = "" if value is None else str(value).strip()
    if w == "list":
        if not text:
            return None
        if text.startswith("["):
            parsed = safe_yaml.load(text, what=f"the {field.key} list", field=field.key)
            if not isinstance(parsed, list):
                raise ValueError(f"must be a list like [a, b], got {short_repr(text)}.")
            return parsed
        parts = [p.strip() for p in text.split(",") if p.strip()]
        if field.item in (int, float):
            try:
                return [field.item(p) for p in parts]
            except ValueError as exc:
                raise ValueError(f"must be comma-separated numbers, got {short_repr(text)}.") from exc
        # str | list[str] (or a list field): one item stays a str only where a str is allowed
        return parts[0] if len(parts) == 1 and (str in field.types or not field.types) else parts
    if not text and (field.nullable or field.default is None):
        return None
    if int in field.types and re.fullmatch(r"-?\d+", text):
        return int(text)
    return text


def rewards_from_rows(rows: Any) -> list[RewardSpec]:
    """RewardSpecs from reward table rows (a list of lists or a pandas DataFrame); blank rows are dropped."""
    if hasattr(rows, "values") and hasattr(rows, "columns"):
        rows = rows.values.tolist()
    default_weight = RewardSpec().weight
    out: list[RewardSpec] = []
    errors: list[FieldError] = []
    for i, row in enumerate(rows or []):
        cells = [_cell(c) for c in list(row) + [None] * (len(REWARD_COLUMNS) - len(row))]
        name, weight, builtin, function, params = cells[: len(REWARD_COLUMNS)]
        if not any(c not in (None, "") for c in cells):
            continue
        try:
            w = default_weight if weight in (None, "") else float(weight)
        except (TypeError, ValueError):
            errors.append(FieldError(f"rewards[{i}].weight", weight, "must be a number, e.g. 1.0."))
            w = default_weight
        parsed: Any = {}
        if params not in (None, ""):
            why = ""
            try:
                parsed = safe_yaml.load(str(params), what="reward params", field=f"rewards[{i}].params")
            except SpecError as exc:
                parsed, why = None, f" It {exc.errors[0].message}"
            if not isinstance(parsed, dict):
                errors.append(
                    FieldError(f"rewards[{i}].params", params, f'must be a JSON object like {{"letter": "a"}}.{why}')
                )
                parsed = {}
        out.append(
            RewardSpec(
                name=str(name or ""),
                weight=w,
                builtin=str(builtin) if builtin else None,
                function=str(function) if function else None,
                params=parsed,
            )
        )
    if errors:
        raise SpecError(errors)
    return out


def _cell(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, str):
        return value.strip()
    return value


def _set(spec: RunSpec, key: str, value: Any) -> None:
    *parents, last = key.split(".")
    obj: Any = spec
    for part in parents:
        obj = getattr(obj, part)
        if obj is None:
            return
    setattr(obj, last, value)


def spec_from_values(values: dict[str, Any], base: RunSpec | None = None) -> RunSpec:
    """Apply form values onto a copy of `base` (what the YAML holds beyond the form survives); raises SpecError."""
    spec = copy.deepcopy(base) if base is not None else RunSpec()
    fields = fields_by_key()
    errors: list[FieldError] = []
    for toggle in (f for f in fields.values() if f.widget == "toggle" and f.key in values):
        parent_key, _, name = toggle.key.rpartition(".")
        parent = _get(spec, parent_key) if parent_key else spec
        if values[toggle.key] and getattr(parent, name) is None:
            cls = next(
                k
                for k in _flat(typing.get_type_hints(type(parent))[name])
                if isinstance(k, type) and dataclasses.is_dataclass(k)
            )
            setattr(parent, name, cls())
        elif not values[toggle.key]:
            setattr(parent, name, None)
    for key, raw in values.items():
        field = fields.get(key)
        if field is None or field.widget in ("toggle", "switch"):
            continue
        try:
            if field.widget == "rewards":
                spec.rewards = rewards_from_rows(raw)
                continue
            value = _parse(field, raw)
        except SpecError as exc:
            errors.extend(exc.errors)
            continue
        except ValueError as exc:
            errors.append(FieldError(key, raw, str(exc)))
            continue
        if field.is_training:
            _set_training(spec.training, field, value)
        elif value is None and not field.nullable:
            continue
        else:
            _set(spec, key, value)
    if errors:
        raise SpecError(errors)
    # A switch flipped away from what the base spec and its fields' values show wins over those values (the form
    # still shows the old ones until the answer updates them); unflipped, the fields decide.
    was = base.training if base is not None else {}
    for sw in (f for f in fields.values() if f.widget == "switch" and f.key in values):
        want = bool(values[sw.key])
        if want != switch_on(was, sw.key) and want != switch_on(spec.training, sw.key):
            _apply_switch(spec.training, sw.key, want)
    return RunSpec.from_yaml(spec.to_yaml())


def _set_training(training: dict[str, Any], field: FormField, value: Any) -> None:
    name = field.key[len("training.") :]
    default = trl_fields.default(name)
    if name in training:
        if value is None and default is None:
            del training[name]
        else:
            training[name] = value
    elif value != default and not (value is None and not field.nullable):
        training[name] = value


def yaml_from_values(values: dict[str, Any], base_yaml: str | None = None) -> str:
    """YAML text of the form values applied onto `base_yaml` (raises SpecError if either is invalid), keeping the
    base text's comments and layout wherever its values did not change (`keep_layout`), and the whole text when
    no value changed."""
    base = RunSpec.from_yaml(base_yaml) if base_yaml and base_yaml.strip() else None
    spec = spec_from_values(values, base)
    if base is not None and base_yaml and spec == base:
        return base_yaml  # nothing changed: the text stays exactly as written, defaults and all
    return keep_layout(base_yaml, spec) if base is not None and base_yaml else spec.to_yaml()


def keep_layout(base_yaml: str, spec: RunSpec) -> str:
    """`spec` as YAML written over `base_yaml` with ruamel.yaml's round trip: the user's comments, key order and
    quoting stay where values are unchanged; changed values are replaced, new keys added, dropped keys removed.
    Falls back to the canonical text (`spec.to_yaml()`) if the result would not read back as `spec`."""
    import io

    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    canonical = spec.to_yaml()
    rt = YAML(typ="rt")
    rt.width = 4096
    rt.preserve_quotes = True
    rt.representer.add_representer(float, _float_as_pyyaml)  # `2e-05` would read back as text in YAML 1.1
    try:
        old = rt.load(base_yaml)
        new = YAML(typ="safe").load(canonical)
        merged = _merge_layout(old, new)
        out = io.StringIO()
        rt.dump(merged, out)
        text = out.getvalue()
        if RunSpec.from_yaml(text) == spec:
            return text
    except (YAMLError, SpecError, ValueError, TypeError, RecursionError):
        pass
    return canonical


def _merge_layout(old: Any, new: Any) -> Any:
    """`new`'s values in `old`'s containers (which carry the comments); unchanged scalars keep their old spelling."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in [k for k in old if k not in new]:
            del old[key]
        for key, value in new.items():
            old[key] = _merge_layout(old[key], value) if key in old else _quoted(value)
        return old
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, value in enumerate(new):
            old[i] = _merge_layout(old[i], value)
        return old
    same_kind = isinstance(old, bool) == isinstance(new, bool) and isinstance(old, str) == isinstance(new, str)
    return old if same_kind and old == new else _quoted(new)


def _float_as_pyyaml(representer: Any, value: float) -> Any:
    import yaml

    text = yaml.safe_dump(value).split("\n", 1)[0]
    return representer.represent_scalar("tag:yaml.org,2002:float", text)


def _quoted(value: Any) -> Any:
    """New values for the round-trip dump: strings the spec's YAML 1.1 reader would take for something else
    (`no`, `1e-3`, `null`) double-quoted."""
    import yaml
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString

    if isinstance(value, dict):
        return {k: _quoted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_quoted(v) for v in value]
    if isinstance(value, str):
        try:
            plain = yaml.safe_load(value) == value
        except yaml.YAMLError:
            plain = False
        return value if plain and "\n" not in value else DoubleQuotedScalarString(value)
    return value


def place_errors(errors: list[FieldError], keys: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """Map each error to the form field it belongs to, and mark every other form field the check that found it
    involves (`FieldError.involves`: a batch that num_generations does not divide involves both); returns
    (key -> messages, errors with no field).

    The message itself is placed once, beside its own field (or, when that field is not on the form, beside the
    first involved field that is); the other involved fields get a pointer to it, so the form does not repeat
    one problem in every field it touches."""
    by_key: dict[str, list[str]] = {}
    unplaced: list[str] = []
    ordered = sorted(keys, key=len, reverse=True)
    known = set(keys)
    for e in errors:
        target = _error_target(e.field, keys, ordered)
        involved = [k for k in dict.fromkeys(e.involves) if k in known and k != target and not _encloses(k, e.field)]
        if target is None and involved:
            target, involved = involved[0], involved[1:]
            text = f"{e.field}: {e.message}"
        else:
            text = f"{e.field}: {e.message}" if target == "rewards" else e.message
        if target is None:
            unplaced.append(str(e))
            continue
        by_key.setdefault(target, []).append(text)
        for key in involved:
            by_key.setdefault(key, []).append(f"see {target}: the problem there involves this field")
    return by_key, unplaced


def _encloses(key: str, path: str) -> bool:
    """True when the form field `key` is `path` or a section holding it (it shows the error already, or its
    section's field does)."""
    return path == key or path.startswith((key + ".", key + "["))


def _error_target(path: str, keys: list[str], ordered: list[str]) -> str | None:
    """The form field an error on `path` is shown beside (the longest key holding it), or None."""
    if path.startswith("rewards"):
        return "rewards" if "rewards" in keys else None
    if path == "dataset":
        return "dataset.data_files" if "dataset.data_files" in keys else None
    return next((k for k in ordered if _encloses(k, path)), None)
