"""The repository as a Space: README front matter, the files deployed, and `deploy-space` against the fake Hub."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gradio
import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from grpo_dashboard import cli
from grpo_dashboard.space import deploy

from .conftest import REPO
from .fake_hub import FakeHub

TOKEN = "hf_DeployerToken0123456789abcdef"


def test_readme_front_matter_is_the_generated_one_and_valid() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    meta = deploy.parse_front_matter(readme)
    assert meta == deploy.front_matter()
    assert deploy.check_repo(REPO) == []
    assert meta["sdk"] == "gradio" and meta["app_file"] == "app.py" and meta["hf_oauth"] is True
    assert "jobs" in meta["hf_oauth_scopes"] and meta["python_version"] == "3.11"
    spec = deploy.requirement_spec((REPO / "requirements.txt").read_text(encoding="utf-8"))
    assert spec and Version(meta["sdk_version"]) in SpecifierSet(spec)
    assert meta["sdk_version"] == gradio.__version__  # the Space runs the gradio the tests ran
    body = readme[len(deploy.render_front_matter()) :]
    assert body.lstrip().startswith("# GRPO Dashboard") and body.index("```bash") < 600


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"sdk_version": "5.49.0"}, "does not satisfy requirements.txt's gradio>=6.31,<7"),
        ({"hf_oauth_scopes": ["read-repos"]}, "it needs 'jobs'"),
        ({"hf_oauth": False}, "hf_oauth is False"),
        ({"python_version": 3.1}, "quoted string"),
        ({"hf_oauth_expiration_minutes": 60}, "use 480 to 43200"),
        ({"app_file": "main.py"}, "app_file is 'main.py'"),
    ],
)
def test_front_matter_problems_are_named(change: dict[str, Any], problem: str) -> None:
    meta = {**deploy.front_matter(), **change}
    problems = deploy.front_matter_problems(meta, "torch>=2\ngradio[oauth]>=6.31,<7  # UI\n")
    assert len(problems) == 1 and problem in problems[0]


def test_requirement_spec_reads_extras_and_comments() -> None:
    assert deploy.requirement_spec("# x\ngradio[oauth] >=6.31,<7 # ui\n") == ">=6.31,<7"
    assert deploy.requirement_spec("gradio_client>=2\n") is None
    assert "does not list gradio" in " ".join(deploy.front_matter_problems(deploy.front_matter(), "torch\n"))


def test_deployed_files_are_the_app_without_tests_or_data() -> None:
    files = deploy.deploy_files(REPO)
    for needed in (
        "app.py",
        "README.md",
        "requirements.txt",
        "grpo_dashboard/space/access.py",
        "grpo_dashboard/ui/app.py",
        "jobs/grpo_job.py",
        "examples/smoke.yaml",
        "examples/data/smoke.jsonl",
    ):
        assert needed in files
    assert not [
        f
        for f in files
        if f.startswith(("tests/", ".git", "test-artifacts/", "benchmarks/", ".cache/"))
        or "__pycache__" in f
        or f.endswith(".pyc")
    ]


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    from huggingface_hub import constants
    from huggingface_hub.utils import disable_progress_bars

    fake = FakeHub(tmp_path / "hub", TOKEN, "me").start()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", fake.url)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.setenv("HF_ENDPOINT", fake.url)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    disable_progress_bars()
    yield fake
    fake.stop()


def test_deploy_space_creates_and_uploads(hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["deploy-space", "me/grpo", "--private", "--bucket", "me/grpo-data"]) == 0
    assert "Deployed:" in capsys.readouterr().out
    repo = hub.repos["me/grpo"]
    assert repo["payload"]["type"] == "space" and repo["payload"]["sdk"] == "gradio"
    assert repo["payload"]["visibility"] == "private"
    assert repo["payload"]["volumes"] == [
        {"type": "bucket", "source": "me/grpo-data", "mountPath": "/data", "readOnly": False}
    ]
    assert repo["payload"]["variables"] == [{"key": "GRPO_DASHBOARD_DATA_DIR", "value": deploy.DATA_DIR_ON_SPACE}]
    assert "me/grpo-data" in hub.buckets
    assert sorted(repo["files"]) == deploy.deploy_files(REPO)
    assert repo["files"]["README.md"] == (REPO / "README.md").read_bytes()
    assert cli.main(["deploy-space", "me/grpo"]) == 0  # again: the Space exists, a new commit updates it
    assert repo["commits"] == 2


def test_a_deploy_is_one_commit_however_many_files(hub: FakeHub, tmp_path: Path) -> None:
    """huggingface_hub's upload_folder commits a folder of more than 250 files in parts, and a Space rebuilds on each
    part, starting once from half an app: the app plus 300 more example files still arrive in one commit."""
    import shutil

    app = tmp_path / "app"
    for rel in deploy.deploy_files(REPO):
        (app / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / rel, app / rel)
    (app / "examples" / "many").mkdir(parents=True)
    for i in range(300):
        (app / "examples" / "many" / f"file_{i}.txt").write_text(f"{i}\n")
    assert len(deploy.deploy_files(app)) > 500
    deploy.deploy_space("me/many", token=TOKEN, endpoint=hub.url, folder=app)
    repo = hub.repos["me/many"]
    assert repo["commits"] == 1 and sorted(repo["files"]) == deploy.deploy_files(app)


def test_deploy_space_errors_are_clear(hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["deploy-space", "not-a-repo-id"]) == 2
    assert "is not OWNER/NAME" in capsys.readouterr().err
    hub.add_user("hf_SomeoneElse0123456789abcdef", "someone")
    assert cli.main(["deploy-space", "someone/grpo"]) == 1
    err = capsys.readouterr().err
    assert "403 Forbidden" in err and TOKEN not in err


def test_dry_run_lists_files(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["deploy-space", "me/grpo", "--dry-run"]) == 0
    assert "app.py" in capsys.readouterr().out.splitlines()
