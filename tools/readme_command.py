"""The README's test command, read from the README itself, so CI (.ci/run) runs what a new user runs.

The command is the one line of README.md's first ```bash block that runs pytest: its set-up (`pip install ...`) and
its test run joined by `&&`. `python tools/readme_command.py` prints the whole line; `--setup` or `--tests` prints
the part before, or after, its last `&&`. Standard library only: .ci/run calls it before any venv exists.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_test_command(text: str) -> str:
    """The line of `text`'s first ```bash block that runs pytest; ValueError unless there is exactly one."""
    block = re.search(r"^```bash\n(.*?)^```", text, re.S | re.M)
    if block is None:
        raise ValueError("README.md has no ```bash block; its first one must hold the set-up and test commands")
    lines = [line.strip() for line in block.group(1).splitlines()]
    found = [line for line in lines if line and not line.startswith("#") and "pytest" in line]
    if len(found) != 1:
        raise ValueError(
            f"README.md's first ```bash block has {len(found)} lines that run pytest; it must have "
            "exactly one (the set-up and test command that CI runs)"
        )
    return found[0]


def split_command(command: str) -> tuple[str, str]:
    """(set-up, tests): the command before and after its last ` && ` (no set-up: an empty string)."""
    setup, _, tests = command.rpartition(" && ")
    return setup, tests


def main(argv: list[str] | None = None) -> int:
    """Print the README's test command, or its set-up or test part."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    part = parser.add_mutually_exclusive_group()
    part.add_argument("--setup", action="store_true", help="only the part before the last `&&` (the installs)")
    part.add_argument("--tests", action="store_true", help="only the part after the last `&&` (the test run)")
    args = parser.parse_args(argv)
    try:
        command = readme_test_command(README.read_text(encoding="utf-8"))
    except ValueError as exc:
        print(f"readme_command: {exc}", file=sys.stderr)
        return 2
    setup, tests = split_command(command)
    print(setup if args.setup else tests if args.tests else command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
