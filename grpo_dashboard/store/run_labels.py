"""`rename RUN NAME` and `tag RUN [--add T] [--remove T]`: a run's display name and tags from the command line.

Tags live in the run's stored spec (`tags`, as a launch wrote them; the runs table and `runs --tag` read them there);
a run whose stored spec does not parse (imported, recovered) gets a minimal one holding its name and tags. Exit codes
as the CLI's: 0 done, 1 refused (a name another run has, a bad tag), 3 no such run.
"""

from __future__ import annotations

import argparse
import sys

from grpo_dashboard.errors import RunNotFound, SpecError
from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.store.db import Run, Store

MAX_TAG = 64


def run_tags(run: Run) -> list[str]:
    """The tags in a run's stored spec ([] when it has none or does not parse)."""
    try:
        return list(RunSpec.from_yaml(run.spec_yaml).tags)
    except SpecError:
        return []


def set_tags(store: Store, run: Run, add: list[str], remove: list[str]) -> list[str]:
    """Add and remove tags on a run (ValueError naming a bad tag); the tags it has afterwards."""
    for tag in add:
        if not tag.strip() or len(tag) > MAX_TAG or "\n" in tag:
            raise ValueError(f"tag {tag[:40]!r} is not usable: give 1 to {MAX_TAG} characters on one line.")
    try:
        spec = RunSpec.from_yaml(run.spec_yaml)
    except SpecError:
        spec = RunSpec(name=run.name)
    tags = [t for t in spec.tags if t not in remove]
    tags += [t.strip() for t in add if t.strip() not in tags]
    spec.tags = tags
    store.update_run(run.id, spec_yaml=spec.to_yaml())
    return tags


def rename_main(argv: list[str]) -> int:
    """rename RUN NAME: give a run another display name (refused when another run has it)."""
    p = argparse.ArgumentParser(prog="rename", description="Give a run another display name (its id stays).")
    p.add_argument("run", help="Run id, unique id prefix, or name.")
    p.add_argument("name", help="The new name (one line, at most 120 characters).")
    args = p.parse_args(argv)
    name = args.name.strip()
    if not name or len(name) > 120 or "\n" in name:
        print(f"name {name[:40]!r} is not usable: give 1 to 120 characters on one line.", file=sys.stderr)
        return 1
    store = Store()
    try:
        run = store.find_run(args.run)
        store.rename_run(run.id, name)
    except RunNotFound as exc:
        print(str(exc), file=sys.stderr)
        return 3
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(f"renamed {run.id}: {run.name} -> {name}")
    return 0


def tag_main(argv: list[str]) -> int:
    """tag RUN [--add T]... [--remove T]...: change a run's tags, then print them."""
    p = argparse.ArgumentParser(prog="tag", description="Show, add or remove a run's tags.")
    p.add_argument("run", help="Run id, unique id prefix, or name.")
    p.add_argument("--add", action="append", default=[], help="A tag to add (repeatable).")
    p.add_argument("--remove", action="append", default=[], help="A tag to remove (repeatable).")
    args = p.parse_args(argv)
    store = Store()
    try:
        run = store.find_run(args.run)
        tags = set_tags(store, run, args.add, args.remove) if args.add or args.remove else run_tags(run)
    except RunNotFound as exc:
        print(str(exc), file=sys.stderr)
        return 3
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(f"{run.id}: {', '.join(tags) if tags else '(no tags)'}")
    return 0
