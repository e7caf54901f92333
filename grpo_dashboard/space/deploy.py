"""Deploy the dashboard as a Hugging Face Space: the README front matter and `deploy-space OWNER/NAME`.

The repository's README.md starts with the Space's YAML front matter (`render_front_matter()` writes it,
`front_matter_problems()` checks it against requirements.txt). `deploy_space` creates the Space
(`create_repo(repo_type="space", space_sdk="gradio")`) and uploads the files the Space needs in one commit
(`create_commit` of `DEPLOY_FILES`, never tests, caches, run data or local settings), optionally mounting a Storage
Bucket for the store.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from grpo_dashboard.spec.presets import PROJECT_ROOT

SDK_VERSION = "6.31.0"  # the gradio the app is tested with; must satisfy requirements.txt
PYTHON_VERSION = "3.11"  # trl>=1.16 needs Python 3.11+
# `jobs` runs Hugging Face Jobs; `write-repos` lets the user's token create the run's artifacts bucket and push the
# trained model (training.push_to_hub) from the job, where it is the job's HF_TOKEN.
OAUTH_SCOPES = ["jobs", "write-repos"]
OAUTH_EXPIRATION_MIN = 10080  # 7 days: a run's job and its log follower use the token for the whole run
DATA_MOUNT = "/data"
DATA_DIR_ON_SPACE = "/data/grpo-dashboard"
DEPLOY_FILES = [
    "app.py",
    "README.md",
    "requirements.txt",
    "pyproject.toml",
    "LICENSE*",
    "grpo_dashboard/**",
    "jobs/**",
    "examples/**",
    "docs/**",
]
DEPLOY_IGNORE = ["**/__pycache__/**", "*.pyc", "**/.*", ".*", "**/*.sqlite*", "**/*.db"]
FRONT_MATTER = re.compile(r"\A---\n(.*?)\n---\n", re.S)


def front_matter() -> dict[str, Any]:
    """The Space configuration (spaces-config-reference): gradio SDK and version, app file, OAuth and scopes."""
    return {
        "title": "GRPO Dashboard",
        "emoji": "🎯",
        "colorFrom": "indigo",
        "colorTo": "pink",
        "sdk": "gradio",
        "sdk_version": SDK_VERSION,
        "python_version": PYTHON_VERSION,
        "app_file": "app.py",
        "short_description": "Launch and watch TRL GRPO runs on your own HF Jobs",
        "hf_oauth": True,
        "hf_oauth_scopes": list(OAUTH_SCOPES),
        "hf_oauth_expiration_minutes": OAUTH_EXPIRATION_MIN,
        "suggested_hardware": "cpu-basic",
        "startup_duration_timeout": "30m",
        "pinned": False,
    }


def render_front_matter(meta: dict[str, Any] | None = None) -> str:
    """The `---`-fenced YAML block README.md starts with."""
    body = yaml.safe_dump(meta or front_matter(), sort_keys=False, allow_unicode=True, width=119)
    return f"---\n{body}---\n"


def parse_front_matter(readme: str) -> dict[str, Any]:
    """The front matter of a README's text; ValueError when it does not start with one."""
    match = FRONT_MATTER.match(readme)
    if not match:
        raise ValueError("README.md does not start with a `---` YAML front matter block; a Space needs one.")
    data = yaml.safe_load(match.group(1))
    if not isinstance(data, dict):
        raise ValueError("README.md's front matter is not a YAML mapping.")
    return data


def requirement_spec(requirements: str, package: str = "gradio") -> str | None:
    """The version specifier of `package` in requirements.txt text (extras dropped), or None if not listed."""
    for line in requirements.splitlines():
        line = line.split("#", 1)[0].strip()
        match = re.match(rf"^{re.escape(package)}(\[[^\]]*\])?\s*([<>=!~].*)?$", line, re.I)
        if match:
            return (match.group(2) or "").strip()
    return None


def front_matter_problems(meta: dict[str, Any], requirements: str) -> list[str]:
    """What is wrong with a Space front matter for this app (empty when it is deployable)."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    problems = []
    expected = {"sdk": "gradio", "app_file": "app.py", "hf_oauth": True}
    for key, value in expected.items():
        if meta.get(key) != value:
            problems.append(f"{key} is {meta.get(key)!r}; the app needs {value!r}.")
    scopes = meta.get("hf_oauth_scopes") or []
    if "jobs" not in scopes:
        problems.append(f"hf_oauth_scopes is {scopes!r}; it needs 'jobs' to run jobs with the user's token.")
    minutes = meta.get("hf_oauth_expiration_minutes", 480)
    if not isinstance(minutes, int) or not 480 <= minutes <= 43200:
        problems.append(f"hf_oauth_expiration_minutes is {minutes!r}; use 480 to 43200 (runs outlive short tokens).")
    if len(str(meta.get("short_description", ""))) > 60:
        problems.append("short_description is longer than the 60 characters a Space allows.")
    if not isinstance(meta.get("python_version"), str):
        problems.append('python_version must be a quoted string such as "3.11" (YAML reads 3.10 as 3.1).')
    spec = requirement_spec(requirements)
    try:
        version = Version(str(meta.get("sdk_version")))
        if spec is None:
            problems.append("requirements.txt does not list gradio.")
        elif version not in SpecifierSet(spec):
            problems.append(f"sdk_version {version} does not satisfy requirements.txt's gradio{spec}.")
    except (InvalidVersion, InvalidSpecifier) as exc:
        problems.append(f"sdk_version {meta.get('sdk_version')!r} or gradio{spec} is not a version: {exc}.")
    return problems


def check_repo(folder: Path = PROJECT_ROOT) -> list[str]:
    """Problems with a checkout's README front matter and requirements (empty: ready to deploy)."""
    try:
        meta = parse_front_matter((folder / "README.md").read_text(encoding="utf-8"))
        requirements = (folder / "requirements.txt").read_text(encoding="utf-8")
    except (OSError, ValueError) as exc:
        return [str(exc)]
    return front_matter_problems(meta, requirements)


def deploy_files(folder: Path = PROJECT_ROOT) -> list[str]:
    """The paths (relative, sorted) that `deploy_space` uploads from `folder` (huggingface_hub's pattern filter)."""
    from huggingface_hub.utils import filter_repo_objects

    paths = [p.relative_to(folder).as_posix() for p in sorted(folder.rglob("*")) if p.is_file()]
    return sorted(filter_repo_objects(paths, allow_patterns=DEPLOY_FILES, ignore_patterns=DEPLOY_IGNORE))


def deploy_space(
    repo_id: str,
    private: bool = False,
    bucket: str | None = None,
    token: str | None = None,
    endpoint: str | None = None,
    folder: Path = PROJECT_ROOT,
) -> str:
    """Create (or update) the Space `repo_id` and upload the app; returns the Space's URL.

    Args:
        repo_id: OWNER/NAME of the Space.
        private: create it private.
        bucket: OWNER/NAME of a Storage Bucket to create (if missing) and mount at /data, with
            GRPO_DASHBOARD_DATA_DIR pointing into it, so runs survive restarts (applied when the Space is created).
        token: a token with write access to OWNER (default: the saved login).
    """
    from huggingface_hub import CommitOperationAdd, HfApi, Volume

    problems = check_repo(folder)
    if problems:
        raise ValueError("Not deployable:\n" + "\n".join(f"  - {p}" for p in problems))
    api = HfApi(endpoint=endpoint, token=token, library_name="grpo-dashboard")
    extra: dict[str, Any] = {}
    if bucket:
        api.create_bucket(bucket, private=True, exist_ok=True)
        extra = {
            "space_volumes": [Volume(type="bucket", source=bucket, mount_path=DATA_MOUNT, read_only=False)],
            "space_variables": [{"key": "GRPO_DASHBOARD_DATA_DIR", "value": DATA_DIR_ON_SPACE}],
        }
    url = api.create_repo(repo_id, repo_type="space", space_sdk="gradio", private=private, exist_ok=True, **extra)
    # One commit, whatever the number of files: upload_folder splits a folder of more than 250 files into several
    # commits, and the Space rebuilds on each, starting once from a half-uploaded app.
    api.create_commit(
        repo_id=repo_id,
        repo_type="space",
        operations=[CommitOperationAdd(path_in_repo=p, path_or_fileobj=str(folder / p)) for p in deploy_files(folder)],
        commit_message="Deploy GRPO Dashboard",
    )
    return str(url)


def deploy_main(argv: list[str] | None = None) -> int:
    """`python -m grpo_dashboard deploy-space OWNER/NAME [--private] [--bucket OWNER/NAME] [--dry-run]`."""
    p = argparse.ArgumentParser(
        prog="python -m grpo_dashboard deploy-space",
        description="Create or update a Hugging Face Space running this dashboard.",
    )
    p.add_argument("repo_id", help="OWNER/NAME of the Space.")
    p.add_argument("--private", action="store_true", help="Create the Space private.")
    p.add_argument("--bucket", help="OWNER/NAME of a Storage Bucket to mount at /data for the store (new Space).")
    p.add_argument("--dry-run", action="store_true", help="Check the front matter and list the files; upload nothing.")
    args = p.parse_args(argv)
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", args.repo_id):
        print(f"error: {args.repo_id!r} is not OWNER/NAME.", file=sys.stderr)
        return 2
    if args.dry_run:
        problems = check_repo()
        for line in problems or deploy_files():
            print(line)
        return 1 if problems else 0
    try:
        url = deploy_space(args.repo_id, private=args.private, bucket=args.bucket)
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except Exception as exc:  # a Hub failure becomes a message, not a traceback
        from grpo_dashboard.launch.hub_client import describe_error

        print(describe_error(exc, f"deploy the Space {args.repo_id}"), file=sys.stderr)
        return 1
    print(f"Deployed: {url} (builds in a few minutes). Sign in there with Hugging Face to launch runs.")
    return 0
