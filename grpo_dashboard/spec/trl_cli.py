"""`import-trl RECIPE -o SPEC` and `export-trl SPEC -o RECIPE`: TRL configs in and out, from the command line.

Exit codes as the CLI's: 0 done; 1 the file cannot be mapped (every problem printed, nothing written); 2 usage.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grpo_dashboard.errors import SpecError


def import_trl_main(argv: list[str], parse: Callable[..., Any] | None = None) -> int:
    """import-trl RECIPE [-o SPEC] [--trl-version V] [--name N] [--model M] [--dataset D] [--reward R]... [--json]

    `parse`: how TRL's parser and checks run (the CLI passes checks.trl_check.parse_local: a subprocess with a time
    limit, so the command never imports trl itself); None runs them in this process."""
    from grpo_dashboard.spec.trl_import import import_trl
    from grpo_dashboard.spec.trl_versions import TRL_DEFAULTS

    p = argparse.ArgumentParser(
        prog="import-trl",
        description="Map a flat TRL config (trl grpo --config, open-r1, "
        "Unsloth, paper recipes) to a run spec, parsing it with TRL's own parser.",
    )
    p.add_argument("recipe", help="The TRL YAML config.")
    p.add_argument("-o", "--output", help="Where to write the spec (default: print it).")
    p.add_argument(
        "--trl-version",
        choices=list(TRL_DEFAULTS),
        help="The TRL release the recipe was written for: "
        "its defaults that 1.16 changed are written out (default: inferred from the keys).",
    )
    p.add_argument("--name", help="Run name (default: the file name).")
    p.add_argument("--model", help="Model for a recipe that names none (papers, scripts with a hard-coded one).")
    p.add_argument("--dataset", help="Hub dataset for a recipe that names none.")
    p.add_argument(
        "--reward",
        action="append",
        help="A reward to add (TRL name, open-r1 name, built-in or dotted path); repeatable.",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="Refuse keys that neither TRL nor a known recipe format has (default: ignore them, as `trl grpo` does).",
    )
    p.add_argument(
        "--allow-drop",
        action="store_true",
        help="Import without a weighted reward that cannot be reproduced (default: refuse, naming it).",
    )
    p.add_argument("--json", action="store_true", help="Print the mapping table and the spec as JSON.")
    args = p.parse_args(argv)
    if not Path(args.recipe).is_file():
        print(f"Recipe file {args.recipe!r} does not exist.", file=sys.stderr)
        return 2
    overrides = {"model": args.model, "dataset": args.dataset, "rewards": args.reward or []}
    try:
        result = import_trl(
            args.recipe,
            args.trl_version,
            name=args.name,
            overrides=overrides,
            parse=parse,
            strict=args.strict,
            allow_drop=args.allow_drop,
        )
    except SpecError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    missing = result.missing()
    text = result.spec.to_yaml()
    if args.json:
        print(
            json.dumps(
                {
                    "trl_version": result.trl_version,
                    "version_reason": result.version_reason,
                    "trl_check": result.trl_check,
                    "rows": [r.to_dict() for r in result.rows],
                    "summary": result.summary(),
                    "missing": missing,
                    "spec": result.spec.to_dict(),
                },
                indent=2,
                default=str,
            )
        )
    else:
        print(result.table(), file=sys.stderr)
        print(f"\nTRL defaults: {result.trl_version} ({result.version_reason}).", file=sys.stderr)
        if result.trl_check:
            print(f"TRL's own check with one process on this machine: {result.trl_check}", file=sys.stderr)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text, encoding="utf-8")
        print(
            f"wrote {args.output}; check it with `python -m grpo_dashboard validate {args.output}`.", file=sys.stderr
        )
    elif not args.json:
        print(text)
    if not args.json:
        dropped = [f"{r.key}={r.value!r}" for r in result.rows if r.action == "dropped" and r.key == "reward_funcs"]
        for reward in dropped:
            print(
                f"warning: the reward {reward} is dropped (--allow-drop): the spec trains without it.", file=sys.stderr
            )
        if missing:
            from grpo_dashboard.spec.trl_import_result import missing_hint

            print(f"incomplete: {missing_hint(missing)}.", file=sys.stderr)
        print(f"import: {result.summary()}.", file=sys.stderr)
    return 0


def _prepare(script: Path, text: str, local: bool) -> None:
    """Write the prepare script; run it at once when it reads only local files (a Hub dataset: the user runs it)."""
    script.write_text(text, encoding="utf-8")
    if not local:
        print(f"wrote {script}: run it once (it downloads the dataset) before `trl grpo`", file=sys.stderr)
        return
    import subprocess

    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        print(f"warning: {script} failed (exit {proc.returncode}); run it again before `trl grpo`:", file=sys.stderr)
        print("\n".join(tail), file=sys.stderr)
        return
    print(f"wrote {script} and ran it: {proc.stdout.strip()}", file=sys.stderr)


def export_trl_main(argv: list[str], job_export: Callable[..., Any] | None = None) -> int:
    """export-trl SPEC [-o RECIPE]: the flat TRL config of a spec, its rewards module, and the command lines.

    `job_export(spec, folder, write=...)` (launch/hf_jobs/export.export_job, passed in by the CLI) gives the HF Jobs
    folder and the `hf` commands that upload it and run the job; with -o the folder is written beside the recipe.
    """
    from grpo_dashboard.spec.jobfiles import job_files
    from grpo_dashboard.spec.run_spec import RunSpec
    from grpo_dashboard.spec.trl_export import export_trl
    from grpo_dashboard.spec.trl_prepare import job_copy

    p = argparse.ArgumentParser(
        prog="export-trl",
        description="Write a run spec as a flat YAML that `trl grpo "
        "--config` accepts, plus the equivalent trl / accelerate / hf jobs command lines.",
    )
    p.add_argument("spec", help="The run spec YAML.")
    p.add_argument("-o", "--output", default=None, help="Where to write the recipe (default: print it).")
    args = p.parse_args(argv)
    if not Path(args.spec).is_file():
        print(f"Spec file {args.spec!r} does not exist.", file=sys.stderr)
        return 2
    out = Path(args.output) if args.output else Path("recipe.yaml")
    try:
        spec = RunSpec.from_file(args.spec)
        export = export_trl(spec, out, base=Path.cwd())
    except SpecError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    if not args.output:
        print(export.yaml_text)
        if export.rewards_module:
            print(f"# {export.rewards_module_name}.py (needed beside the recipe):\n{export.rewards_module}")
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(export.yaml_text, encoding="utf-8")
        print(f"wrote {out}", file=sys.stderr)
        if export.rewards_module:
            module = out.parent / f"{export.rewards_module_name}.py"
            module.write_text(export.rewards_module, encoding="utf-8")
            print(
                f"wrote {module} (reward_funcs import it; the recipe's env puts its folder on PYTHONPATH)",
                file=sys.stderr,
            )
        if export.rewards_module or export.prepare_script:
            copy = job_copy(out)
            copy.mkdir(exist_ok=True)
            for source in job_files():
                shutil.copy2(source, copy / source.name)
            print(f"wrote {copy} (the job's modules they import)", file=sys.stderr)
        if export.prepare_script:
            _prepare(
                out.parent / export.prepare_name,
                export.prepare_script,
                local=not (spec.dataset.path or spec.dataset.mixture),
            )
    for note in export.notes:
        print(f"warning: {note}", file=sys.stderr)
    for kind, command in export.commands.items():
        print(f"{kind:>10}: {command}", file=sys.stderr)
    if job_export is not None:
        jobs = job_export(spec, out.parent.resolve() / f"{out.stem}_hf_job", write=bool(args.output))
        if jobs.problems:
            where = f"{jobs.folder} is not written: the spec does not validate"
        else:
            where = f"wrote {jobs.folder} (the job's files)" if args.output else f"{jobs.folder} is written with -o"
        print(
            f"On Hugging Face Jobs without the dashboard ({where}; run them with HF_TOKEN and the spec's "
            "secrets set in your environment):",
            file=sys.stderr,
        )
        for kind, command in jobs.commands.items():
            print(f"{kind:>10}: {command}", file=sys.stderr)
        for problem in jobs.problems:
            print(
                f"warning: {problem} (the dashboard would refuse the spec; fix it and export again)", file=sys.stderr
            )
    return 0
