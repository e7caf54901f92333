"""The package installs and works outside the checkout: an sdist built from the repository's files, installed into a
fresh virtual environment, carries every module, the job scripts and the examples, and its `grpo-dashboard` console
script lists every command, validates a spec and serves the app from any directory.

Offline and quick: the environment sees this interpreter's packages (the dependencies are already installed there),
and pip installs the sdist alone (--no-deps --no-build-isolation --no-index, with the setuptools installed here).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import site
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import tomllib
import yaml

from grpo_dashboard import cli

from .conftest import REPO, free_port, wait_for

# what the sdist is built from
SOURCES = ["pyproject.toml", "setup.py", "README.md", "grpo_dashboard", "jobs", "examples"]
HEALTHY_STATE = REPO / "tests" / "fixtures" / "health" / "healthy_state.json"


def requirements(name: str = "requirements.txt") -> list[str]:
    """A requirements file's requirement lines (comments, blank lines and `-r` includes left out)."""
    lines = (REPO / name).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith(("#", "-r"))]


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without anything that would point Python or Gradio elsewhere (the data dir is the test's)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "GRADIO_SERVER_NAME", "GRADIO_SERVER_PORT")
    }
    return {**env, "HF_HUB_OFFLINE": "1", **extra}


class Installed:
    """A virtual environment holding the package installed from an sdist of the checkout, and a directory far from
    the checkout to run it in."""

    def __init__(self, root: Path) -> None:
        src, dist = root / "src", root / "dist"
        for name in SOURCES:
            path = REPO / name
            if path.is_dir():
                shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                src.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, src / name)
        out = subprocess.run(
            [sys.executable, "-c", f"from setuptools import build_meta as b; print(b.build_sdist({str(dist)!r}))"],
            cwd=src,
            capture_output=True,
            text=True,
            timeout=300,
            env=clean_env(),
        )
        assert out.returncode == 0, out.stdout + out.stderr
        self.sdist = dist / out.stdout.split()[-1]
        self.venv = root / "venv"
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(self.venv)],
            check=True,
            timeout=120,
        )
        self.python = self.venv / "bin" / "python"
        self.site = Path(self.run_python("import sysconfig; print(sysconfig.get_path('purelib'))").strip())
        # The packages of this interpreter, also when it is itself a venv (whose packages --system-site-packages
        # would not show); after the venv's own, so the installed copy of grpo_dashboard is the one imported.
        (self.site / "outer.pth").write_text("\n".join(site.getsitepackages()) + "\n")
        out = subprocess.run(
            [
                str(self.python),
                "-m",
                "pip",
                "install",
                "--no-deps",
                "--no-build-isolation",
                "--no-index",
                "--quiet",
                str(self.sdist),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=clean_env(PIP_DISABLE_PIP_VERSION_CHECK="1"),
        )
        assert out.returncode == 0, out.stdout + out.stderr
        self.script = self.venv / "bin" / "grpo-dashboard"
        self.work = root / "elsewhere"
        self.work.mkdir()

    def run_python(self, code: str) -> str:
        out = subprocess.run(
            [str(self.python), "-c", code], cwd=self.venv, capture_output=True, text=True, timeout=300, env=clean_env()
        )
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`grpo-dashboard ARGS` run from the directory outside the checkout."""
        return subprocess.run(
            [str(self.script), *args], cwd=self.work, capture_output=True, text=True, timeout=300, env=clean_env()
        )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    return Installed(tmp_path_factory.mktemp("package"))


def files(root: Path, pattern: str = "**/*") -> set[str]:
    return {
        p.relative_to(root).as_posix()
        for p in root.glob(pattern)
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def test_pyproject_dependencies_are_requirements_txt() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["dependencies"] == requirements()
    assert project["optional-dependencies"] == {"train": requirements("requirements-train.txt")}
    assert (REPO / "requirements-train.txt").read_text(encoding="utf-8").count("-r requirements.txt\n") == 1
    light = {r.split(">")[0].split("=")[0].split("[")[0] for r in requirements()}
    assert not light & {"torch", "trl", "transformers", "accelerate", "peft"}, "the dashboard needs no training stack"
    assert project["requires-python"] == ">=3.11"
    assert project["scripts"] == {"grpo-dashboard": "grpo_dashboard.__main__:main"}


def test_the_installed_package_holds_every_module_the_jobs_and_the_examples(installed: Installed) -> None:
    where = json.loads(
        installed.run_python(
            "import json, grpo_dashboard\n"
            "from grpo_dashboard.spec import jobfiles, presets\n"
            "print(json.dumps({'package': grpo_dashboard.__file__, 'jobs': str(jobfiles.JOBS_DIR),\n"
            "                  'script': str(jobfiles.JOB_SCRIPT), 'examples': str(presets.EXAMPLES_DIR),\n"
            "                  'root': str(presets.PROJECT_ROOT),\n"
            "                  'jobs_files': [str(p) for p in jobfiles.job_files()],\n"
            "                  'preset': presets.preset_spec(presets.DEFAULT_PRESET).name}))"
        )
    )
    package = Path(where["package"]).parent
    for key in ("package", "jobs", "script", "examples", "root"):
        path = Path(where[key])
        assert path.is_relative_to(installed.site), (key, path)
        assert not path.is_relative_to(REPO), (key, path)
    assert Path(where["script"]).is_file() and where["preset"] == "smoke"
    root = Path(where["root"])
    assert Path(where["jobs"]) == root / "jobs" and Path(where["examples"]) == root / "examples"
    installed_modules = {f for f in files(package, "**/*.py") if not f.startswith("_project/")}
    assert installed_modules == files(REPO / "grpo_dashboard", "**/*.py"), "a package missing from pyproject.toml?"
    data = ("spec/trl_schema.json", "spec/trl_accelerate_configs/*.yaml")  # package data the app reads instead of trl
    assert set().union(*(files(package, d) for d in data)) == set().union(
        *(files(REPO / "grpo_dashboard", d) for d in data)
    )
    assert {Path(p).name for p in where["jobs_files"]} == files(REPO / "jobs", "*.py")
    assert files(Path(where["examples"])) == files(REPO / "examples")

    from packaging.requirements import Requirement

    requires = json.loads(
        installed.run_python(
            "import importlib.metadata, json; print(json.dumps(importlib.metadata.requires('grpo-dashboard')))"
        )
    )
    extra = [Requirement(f"{r}; extra == 'train'") for r in requirements("requirements-train.txt")]
    assert [Requirement(r) for r in requires] == [Requirement(r) for r in requirements()] + extra


def commands() -> list[str]:
    """Every command of the CLI's parser."""
    sub = next(a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


def test_console_script_lists_every_command(installed: Installed) -> None:
    out = installed.cli("--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: grpo-dashboard")
    names = commands()
    assert {
        "serve",
        "validate",
        "launch",
        "runs",
        "show",
        "logs",
        "cancel",
        "watch",
        "doctor",
        "check-rewards",
        "inspect-dataset",
        "hardware",
        "deploy-space",
        "build-tiny-model",
    } <= set(names)
    for name in names:
        assert name in out.stdout, name
    out = installed.cli("serve", "--help")
    assert out.returncode == 0 and "--host" in out.stdout and "--port" in out.stdout, out.stdout + out.stderr


def test_console_script_validates_and_diagnoses_from_any_directory(installed: Installed) -> None:
    examples = Path(
        installed.run_python("from grpo_dashboard.spec.presets import EXAMPLES_DIR; print(EXAMPLES_DIR)").strip()
    )
    spec = yaml.safe_load((examples / "smoke.yaml").read_text(encoding="utf-8"))
    spec["dataset"]["data_files"] = str(examples / "data" / "smoke.jsonl")  # relative paths are from the cwd
    (installed.work / "smoke.yaml").write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    out = installed.cli("validate", "smoke.yaml")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "smoke.yaml: valid (smoke)." in out.stdout
    out = installed.cli("validate", "missing.yaml")
    assert out.returncode == cli.EXIT_USAGE, out.stdout + out.stderr
    out = installed.cli("doctor", str(HEALTHY_STATE), "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout) == []


def test_console_script_serves_the_app(installed: Installed, tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [str(installed.script), "serve", "--port", str(port)],
            cwd=installed.work,
            env=clean_env(),
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def config() -> dict[str, Any] | None:
        assert proc.poll() is None, log.read_text(errors="replace")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/config", timeout=5) as r:
                return json.loads(r.read()) if r.status == 200 else None
        except OSError:
            return None

    try:
        cfg = wait_for(config, timeout=240, interval=0.5)
        assert cfg["title"] == "GRPO Dashboard"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_serve_launches_build_app_with_launch_options(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import grpo_dashboard.__main__ as entry
    from grpo_dashboard import ui
    from grpo_dashboard.ui import serving

    launched: list[dict[str, Any]] = []

    class Demo:
        def launch(self, **kwargs: Any) -> None:
            launched.append(kwargs)

    monkeypatch.setattr(ui, "build_app", lambda: Demo())
    monkeypatch.setattr(serving, "limit_malloc_arenas", lambda: False)
    assert entry.main(["--data-dir", str(tmp_path / "d"), "serve", "--host", "0.0.0.0", "--port", "7999"]) == 0
    assert os.environ["GRPO_DASHBOARD_DATA_DIR"] == str(tmp_path / "d")
    assert entry.main(["serve"]) == 0  # no flags: Gradio reads GRADIO_SERVER_NAME / GRADIO_SERVER_PORT
    options = ui.launch_options()
    assert launched[0]["server_name"] == "0.0.0.0" and launched[0]["server_port"] == 7999
    assert launched[1]["server_name"] is None and launched[1]["server_port"] is None
    assert set(launched[0]) == {"server_name", "server_port", *options}
    assert cli.main(["serve"]) == cli.EXIT_USAGE  # cli.py alone cannot serve: it never imports the UI
