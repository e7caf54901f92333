"""CI runs what a new user runs: .ci/run reads the README's test command, runs its set-up in a fresh venv, the static
checks (any failure fails the run), then its tests with the sandbox expected; and there a skipped security test is
a failure."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))

import readme_command  # noqa: E402

CHECKS = ["ruff check .", "ruff format --check .", "lint-imports", "mypy"]
FAKE_README = """# x

```bash
# 1. run
python app.py

# 2. test
python -c "import sys; print('setup', sys.prefix)" >> {log} && fakepytest -q
```
"""
FAKE = """#!/bin/sh
echo "$(echo $(basename "$0") $*) | $VIRTUAL_ENV | ${{GRPO_DASHBOARD_EXPECT_SANDBOX:-}}" >> {log}
exit {rc}
"""


def test_the_readme_test_command_is_read_from_the_readme() -> None:
    command = readme_command.readme_test_command((REPO / "README.md").read_text(encoding="utf-8"))
    setup, tests = readme_command.split_command(command)
    assert "pip install" in setup and "pytest" in tests and "pytest" not in setup
    assert f"{setup} && {tests}" == command
    with pytest.raises(ValueError, match="2 lines that run pytest"):
        readme_command.readme_test_command("```bash\npytest -q\npython -m pytest\n```\n")
    with pytest.raises(ValueError, match="no ```bash block"):
        readme_command.readme_test_command("no block\n")


def ci_run(tmp_path: Path, failing: str = "") -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """.ci/run on a copy of the repository's CI files with a stand-in README and stand-in tools (each logs its
    call and the venv it runs in); `failing` names a tool that exits 1."""
    repo, bin_dir, log = tmp_path / "repo", tmp_path / "bin", tmp_path / "calls.log"
    (repo / ".ci").mkdir(parents=True)
    (repo / "tools").mkdir()
    bin_dir.mkdir()
    shutil.copy(REPO / ".ci" / "run", repo / ".ci" / "run")
    shutil.copy(REPO / "tools" / "readme_command.py", repo / "tools" / "readme_command.py")
    (repo / "README.md").write_text(FAKE_README.format(log=log), encoding="utf-8")
    tools = ("ruff", "lint-imports", "mypy", "fakepytest", "chromium", "bwrap", "sbatch", "munged", "g++", "apt-get")
    for tool in tools:
        (bin_dir / tool).write_text(FAKE.format(log=log, rc=1 if tool == failing else 0), encoding="utf-8")
        (bin_dir / tool).chmod(0o755)
    python = Path(getattr(sys, "_base_executable", sys.executable)).parent  # a python3 that can make a venv
    env = {**os.environ, "PATH": f"{bin_dir}:{python}:/usr/bin:/bin", "GRPO_CI_VENV": str(tmp_path / "venv")}
    for key in ("VIRTUAL_ENV", "GRPO_DASHBOARD_EXPECT_SANDBOX", "PYTHONPATH"):
        env.pop(key, None)
    done = subprocess.run(["bash", str(repo / ".ci" / "run")], capture_output=True, text=True, env=env, timeout=300)
    return done, log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def test_ci_runs_the_readme_command_in_a_fresh_venv_with_the_checks_between(tmp_path: Path) -> None:
    done, calls = ci_run(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    venv = str(tmp_path / "venv")
    assert calls == [f"setup {venv}", *(f"{check} | {venv} | 1" for check in CHECKS), f"fakepytest -q | {venv} | 1"]


@pytest.mark.parametrize("failing", ["ruff", "mypy"])
def test_a_failing_check_fails_ci_before_the_tests(tmp_path: Path, failing: str) -> None:
    done, calls = ci_run(tmp_path, failing=failing)
    assert done.returncode != 0
    assert calls[-1].startswith(f"{failing} ") and not any(call.startswith("fakepytest") for call in calls)


SECURITY_TEST = """import pytest
from tests.conftest import not_applicable

def test_plain_skip():
    pytest.skip("bubblewrap cannot create a sandbox here")

@pytest.mark.skipif(True, reason="marked")
def test_marked_skip():
    pass

def test_not_applicable():
    not_applicable("the weak fallbacks do not bound tasks")

@pytest.mark.xfail(reason="known")
def test_xfail():
    assert False
"""


@pytest.mark.parametrize("expect", ["1", ""])
def test_a_skipped_security_test_fails_where_the_sandbox_is_expected(tmp_path: Path, expect: str) -> None:
    (tmp_path / "conftest.py").write_text("from tests.conftest import pytest_runtest_makereport  # noqa: F401\n")
    (tmp_path / "test_security.py").write_text(SECURITY_TEST)
    (tmp_path / "test_other.py").write_text("import pytest\n\ndef test_skip():\n    pytest.skip('no Slurm here')\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "GRPO_DASHBOARD_EXPECT_SANDBOX": expect}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    last = done.stdout.strip().splitlines()[-1]
    if expect:
        # the plain skip fails, and the skipif mark's skip too (at set-up, so pytest counts it as an error)
        assert done.returncode == 1 and "1 failed, 2 skipped, 1 xfailed, 1 error" in last, done.stdout
        assert "but this security test was skipped: bubblewrap cannot create a sandbox here" in done.stdout
        assert "ERROR test_security.py::test_marked_skip" in done.stdout
        assert "SKIPPED [1] test_security.py:11: the weak fallbacks" in done.stdout  # reported at the test
    else:
        assert done.returncode == 0 and "4 skipped, 1 xfailed" in last, done.stdout
