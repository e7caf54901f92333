"""Read GRPOConfig's defaults out of released TRL wheels and print how they differ from the installed TRL's.

    python tools/trl_release_defaults.py --download 0.14.0 0.16.0 0.18.0         # pip download --no-deps, then diff
    python tools/trl_release_defaults.py --wheel trl-0.18.0-py3-none-any.whl     # a wheel you already have
    python tools/trl_release_defaults.py --download 0.14.0 0.16.0 0.18.0 \
        --write tests/fixtures/trl_release_defaults.json

Nothing is installed or imported from the wheels: `trl/trainer/grpo_config.py` is parsed (its GRPOConfig class body:
each field's literal default) and `trl/trainer/grpo_trainer.py` is searched for the two behaviours that old releases
had no field for (how the loss is normalised, and where vLLM generates). `--write` saves that extract, with each
wheel's name and sha256, as JSON; tests/test_trl_release_defaults.py checks `trl_versions.TRL_DEFAULTS` and the
version markers against it through `pins()` and `markers()` below, so the table cannot drift from the releases.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

# Old values that mean the same as 1.16's under another spelling: (field, old) -> 1.16 value.
SAME_MEANING: dict[tuple[str, Any], Any] = {
    ("scale_rewards", True): "group",
    ("scale_rewards", False): "none",
    ("top_k", None): 0,  # both switch top-k filtering off
}
# Changed defaults that are deliberately not pinned, with the reason.
NOT_PINNED: dict[str, str] = {
    "vllm_gpu_memory_utilization": "1.16 reads it in colocate mode only; the old releases ran vLLM on its own GPU "
    "(server mode), where the server's own flag sets it",
    "vllm_server_timeout": "how long the trainer waits for a vLLM server to come up, not training behaviour",
}
# Fields that only matter when the recipe generates with vLLM.
VLLM_ONLY = ("vllm_mode",)
# The loss normalisations of releases without `loss_type`, as TRL 1.16 names them.
LOSS_FORMS = (
    (
        re.compile(
            r"\(\(per_token_loss \* completion_mask\)\.sum\(dim=1\) / completion_mask\.sum\(dim=1\)\)\.mean\(\)"
        ),
        "grpo",
    ),
    (re.compile(r"loss = \(per_token_loss \* completion_mask\)\.sum\(\) / completion_mask\.sum\(\)"), "bnpo"),
)


def _literal(node: ast.expr | None) -> Any:
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except ValueError:
        return {"source": ast.unparse(node)}


def grpo_config_defaults(source: str) -> dict[str, Any]:
    """Each field of the GRPOConfig class body and its default (a literal, or {"source": ...} when it is not one)."""
    out: dict[str, Any] = {}
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.ClassDef) and node.name == "GRPOConfig"):
            continue
        for stmt in node.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            value = stmt.value
            if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "field":
                kw = {k.arg: k.value for k in value.keywords}
                default = kw.get("default")
                if default is None and "default_factory" in kw:
                    factory = kw["default_factory"]
                    default = factory.body if isinstance(factory, ast.Lambda) else factory
                out[stmt.target.id] = _literal(default)
            else:
                out[stmt.target.id] = _literal(value)
    return out


def trainer_behaviour(source: str, fields: dict[str, Any]) -> dict[str, dict[str, str]]:
    """What a release did that it had no GRPOConfig field for: {field: {"value": ..., "evidence": ...}}."""
    out: dict[str, dict[str, str]] = {}
    if "loss_type" not in fields:
        for pattern, name in LOSS_FORMS:
            match = pattern.search(source)
            if match:
                out["loss_type"] = {"value": name, "evidence": f"grpo_trainer.py: {match.group(0)}"}
                break
    if "vllm_mode" not in fields and "use_vllm" in fields:
        if "VLLMClient" in source:
            out["vllm_mode"] = {
                "value": "server",
                "evidence": "grpo_trainer.py generates through VLLMClient (a `trl vllm-serve` server)",
            }
        elif "vllm_device" in fields and re.search(r"\bLLM\(", source):
            out["vllm_mode"] = {
                "value": "server",
                "evidence": "grpo_trainer.py starts vllm.LLM on its own GPU "
                "(vllm_device): a separate GPU, as 1.16's server mode",
            }
    return out


def read_wheel(path: Path) -> dict[str, Any]:
    """The extract of one TRL wheel: version, wheel name, sha256, GRPOConfig defaults and trainer behaviour."""
    data = path.read_bytes()
    with zipfile.ZipFile(path) as zf:
        config = zf.read("trl/trainer/grpo_config.py").decode("utf-8")
        trainer = zf.read("trl/trainer/grpo_trainer.py").decode("utf-8")
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        version = re.search(r"^Version: (\S+)$", zf.read(meta).decode("utf-8"), re.M).group(1)
    fields = grpo_config_defaults(config)
    return {
        "version": version,
        "wheel": path.name,
        "sha256": hashlib.sha256(data).hexdigest(),
        "grpo_config": fields,
        "behaviour": trainer_behaviour(trainer, fields),
    }


def current_defaults() -> dict[str, Any]:
    """Every GRPOConfig field of the installed TRL with its effective default (inherited ones included)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from grpo_dashboard.spec.trl_fields import grpo_fields

    return {name: f.default for name, f in grpo_fields().items()}


def pins(entry: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """The defaults of a release that the installed TRL changed: what `import-trl --trl-version` writes out.

    Only fields the old GRPOConfig declared itself are compared (the rest came from that era's transformers);
    equal meanings under another spelling and NOT_PINNED are left out; trainer behaviours without a field count.
    """
    out: dict[str, Any] = {}
    for name, old in entry["grpo_config"].items():
        if name not in current or name in NOT_PINNED or isinstance(old, dict):
            continue
        if SAME_MEANING.get((name, old), old) != current[name]:
            out[name] = old
    for name, b in entry["behaviour"].items():
        if name in current and b["value"] != current[name]:
            out[name] = b["value"]
    return out


def removed(entry: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """GRPOConfig fields of a release that the installed TRL no longer has."""
    return [name for name in entry["grpo_config"] if name not in current]


def markers(extract: dict[str, dict[str, Any]], current: dict[str, Any]) -> dict[str, str]:
    """For each field a newer TRL dropped: the newest release (of the extract) that still has it."""
    out: dict[str, str] = {}
    for key in sorted(extract, key=lambda v: tuple(int(x) for x in v.split("."))):
        for name in removed(extract[key], current):
            out[name] = key
    return out


def short(version: str) -> str:
    """'0.18.0' -> '0.18' (the table's keys)."""
    return ".".join(version.split(".")[:2])


def _download(versions: list[str], into: Path) -> list[Path]:
    wheels = []
    for v in versions:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", f"trl=={v}", "-d", str(into)], check=True
        )
        wheels.append(next(into.glob(f"trl-{v}-*.whl")))
    return wheels


def main(argv: list[str] | None = None) -> int:
    """Print the diff of each wheel against the installed TRL (and write the extract with --write)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wheel", nargs="*", default=[], help="TRL wheel files.")
    p.add_argument("--download", nargs="*", default=[], help="TRL versions to `pip download --no-deps`.")
    p.add_argument("--write", help="Write the extract (JSON) here.")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        wheels = [Path(w) for w in args.wheel] + _download(args.download, Path(tmp))
        extract = {short(e["version"]): e for e in map(read_wheel, wheels)}
    current = current_defaults()
    import trl

    for entry in extract.values():
        print(
            f"== TRL {entry['version']} ({entry['wheel']}, sha256 {entry['sha256']}) vs installed TRL "
            f"{trl.__version__}"
        )
        for name, old in entry["grpo_config"].items():
            if name not in current:
                print(f"  removed   {name} = {old!r}")
            elif SAME_MEANING.get((name, old), old) != current[name]:
                why = f"   (not pinned: {NOT_PINNED[name]})" if name in NOT_PINNED else ""
                print(f"  changed   {name}: {old!r} -> {current[name]!r}{why}")
        for name, b in entry["behaviour"].items():
            print(f"  behaviour {name}: {b['value']!r} -> {current.get(name)!r}   ({b['evidence']})")
        print(f"  pins: {pins(entry, current)}")
    print(f"markers: {markers(extract, current)}")
    if args.write:
        Path(args.write).write_text(
            json.dumps(
                {"generated_by": "tools/trl_release_defaults.py", "releases": extract}, indent=1, sort_keys=True
            )
            + "\n"
        )
        print(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
