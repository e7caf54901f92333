"""TRL's config classes (GRPOConfig, AsyncGRPOConfig) as data, read without importing TRL.

Importing trl imports transformers and torch (seconds, over a thousand modules), and a Space that only launches HF
Jobs has neither installed. So the field list (names, types, defaults, help, the values of enum-typed fields) is a
JSON schema: `trl_schema.json` beside this module is built from the TRL and transformers the project pins, and
`schema()` uses it as it is when the installed versions are the same or trl is not installed at all (a Space). For
other installed versions one is built once in a subprocess (which imports trl) and cached per versions in
`$GRPO_DASHBOARD_TRL_SCHEMA_DIR` (default `~/.cache/grpo_dashboard/trl_schema`: it depends on the Python environment,
not on a data directory). tests/test_trl_schema.py checks the schema in use against the real classes.

    python -m grpo_dashboard.spec.trl_schema --build            # print the installed TRL's schema
    python -m grpo_dashboard.spec.trl_schema --build --write    # rewrite trl_schema.json (and the presets) from it

TRL's accelerate presets (zero1/2/3, fsdp1/2, ...) ship beside it too (`trl_accelerate_configs/`), so an HF Jobs
launch from a Space without trl still uploads the preset it names.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import functools
import importlib.metadata
import json
import logging
import os
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any

SHIPPED = Path(__file__).with_name("trl_schema.json")
PRESETS = Path(__file__).with_name("trl_accelerate_configs")  # TRL's accelerate presets, for where trl is missing
CACHE_ENV = "GRPO_DASHBOARD_TRL_SCHEMA_DIR"
BUILD_TIMEOUT_S = 300.0
# The config classes, by the module TRL defines them in.
CONFIGS = {"GRPOConfig": "trl", "AsyncGRPOConfig": "trl.experimental.async_grpo"}
VERSIONED = ("trl", "transformers")  # GRPOConfig inherits most of its fields from transformers' TrainingArguments
# Type names in the schema and the Python types they stand for; enums and other classes become stand-ins.
BASIC: dict[str, Any] = {
    "int": int,
    "float": float,
    "str": str,
    "bool": bool,
    "list": list,
    "dict": dict,
    "NoneType": type(None),
    "Literal": typing.Literal,
}
ENUM, CLASS = "enum:", "class:"

log = logging.getLogger(__name__)


def installed_versions() -> dict[str, str | None]:
    """The installed trl and transformers versions: a loaded module's own `__version__` (in a training process, so
    that a callback's start does not parse package metadata), else from the package metadata (nothing is imported)."""
    out: dict[str, str | None] = {}
    for name in VERSIONED:
        loaded = getattr(sys.modules.get(name), "__version__", None)
        if isinstance(loaded, str):
            out[name] = loaded
            continue
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def trl_dir() -> Path | None:
    """The installed trl package's folder, found without importing it (None when trl is not installed)."""
    import importlib.util

    try:
        found = importlib.util.find_spec("trl")
    except (ImportError, ValueError):
        return None
    locations = list(found.submodule_search_locations or []) if found is not None else []
    return Path(locations[0]) if locations else None


def accelerate_preset(name: str) -> Path | None:
    """TRL's accelerate config preset `name` (zero2, fsdp2, ...): the installed TRL's file, else the copy shipped
    beside this module; None when neither exists."""
    installed = trl_dir()
    for folder in ([installed / "accelerate_configs"] if installed else []) + [PRESETS]:
        path = folder / f"{name}.yaml"
        if path.is_file():
            return path
    return None


# -- building (imports trl: only in `python -m grpo_dashboard.spec.trl_schema --build` or a test) ------------------


def _flatten(annotation: Any) -> tuple[Any, ...]:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return tuple(k for arg in typing.get_args(annotation) for k in _flatten(arg))
    origin = typing.get_origin(annotation)
    return (origin if origin is not None else annotation,)


def _type_name(kind: Any) -> str:
    for name, basic in BASIC.items():
        if kind is basic:
            return name
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return ENUM + kind.__name__
    return CLASS + getattr(kind, "__name__", str(kind))


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, enum.Enum) else value


def config_schema(cls: type) -> list[dict[str, Any]]:
    """One config dataclass's init fields as schema entries: name, types, default, help, enum values."""
    hints = typing.get_type_hints(cls)
    out: list[dict[str, Any]] = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        kinds = _flatten(hints.get(f.name, f.type))
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else (f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        )
        enums = [k for k in kinds if isinstance(k, type) and issubclass(k, enum.Enum)]
        out.append(
            {
                "name": f.name,
                "types": [_type_name(k) for k in kinds],
                "default": _plain(default),
                "help": str(f.metadata.get("help", "")).strip(),
                "enum_values": [e.value for e in enums[0]] if enums else None,
            }
        )
    return out


def build() -> dict[str, Any]:
    """The schema of the installed TRL's config classes (imports trl; a class this TRL lacks is left out)."""
    import importlib

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    configs: dict[str, Any] = {}
    for name, module in CONFIGS.items():
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
        configs[name] = config_schema(cls)
    return {
        "generated_by": "python -m grpo_dashboard.spec.trl_schema --build --write",
        "versions": installed_versions(),
        "configs": configs,
    }


def dumps(schema: dict[str, Any]) -> str:
    """The schema as the file holds it (stable: a rebuild of the same TRL gives the same bytes)."""
    return json.dumps(schema, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


# -- reading (no trl import) ----------------------------------------------------------------------------------------


def cache_dir() -> Path:
    """Where schemas built for other installed versions are kept."""
    raw = os.environ.get(CACHE_ENV)
    if raw:
        return Path(raw).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "grpo_dashboard" / "trl_schema"


def _build_in_subprocess() -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "grpo_dashboard.spec.trl_schema", "--build"],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"building the TRL schema failed: {last}")
    return json.loads(done.stdout)


@functools.cache
def schema() -> dict[str, Any]:
    """The schema of the installed TRL: the shipped one when it matches (or trl is not installed), else a cached or
    freshly built one; the shipped one, with a warning, when building fails."""
    shipped = json.loads(SHIPPED.read_text(encoding="utf-8"))
    versions = installed_versions()
    if versions["trl"] is None or versions == shipped["versions"]:
        return shipped
    path = cache_dir() / ("-".join(f"{k}-{v}" for k, v in sorted(versions.items())) + ".json")
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
        if cached.get("versions") == versions:
            return cached
    except (OSError, ValueError):
        pass
    try:
        built = _build_in_subprocess()
    except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
        log.warning("using the schema of trl %s (installed: %s): %s", shipped["versions"]["trl"], versions, exc)
        return shipped
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(dumps(built), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:  # a read-only home: build again next time
        log.warning("could not cache the TRL schema at %s: %s", path, exc)
    return built


@functools.cache
def _stand_in(name: str, values: tuple[Any, ...] | None) -> type:
    """A class standing for a TRL-side type the schema names (an enum keeps its values as `__members__`)."""
    attrs: dict[str, Any] = {"__module__": "trl_schema"}
    if values is not None:
        attrs["__members__"] = {str(v): v for v in values}
    return type(name, (), attrs)


def python_types(entry: dict[str, Any]) -> tuple[Any, ...]:
    """A schema entry's types as Python types (stand-in classes for enums and other TRL-side classes)."""
    out: list[Any] = []
    for name in entry["types"]:
        if name in BASIC:
            out.append(BASIC[name])
        elif name.startswith(ENUM):
            out.append(_stand_in(name[len(ENUM) :], tuple(entry.get("enum_values") or ())))
        else:
            out.append(_stand_in(name.removeprefix(CLASS), None))
    return tuple(out)


def entries(config: str) -> list[dict[str, Any]]:
    """The schema entries of one config class (KeyError when the installed TRL has no such class)."""
    return schema()["configs"][config]


def main(argv: list[str] | None = None) -> int:
    """`--build`: print the installed TRL's schema (`--write`: into trl_schema.json)."""
    p = argparse.ArgumentParser(prog="python -m grpo_dashboard.spec.trl_schema", description=__doc__.split("\n")[0])
    p.add_argument("--build", action="store_true", help="build from the installed TRL (imports it)")
    p.add_argument("--write", action="store_true", help=f"write it to {SHIPPED.name}")
    args = p.parse_args(argv)
    if not args.build:
        p.error("nothing to do: give --build")
    import warnings

    warnings.simplefilter("ignore")
    text = dumps(build())
    if args.write:
        SHIPPED.write_text(text, encoding="utf-8")
        installed = trl_dir()
        if installed is not None:
            PRESETS.mkdir(exist_ok=True)
            for preset in sorted((installed / "accelerate_configs").glob("*.yaml")):
                (PRESETS / preset.name).write_bytes(preset.read_bytes())
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
