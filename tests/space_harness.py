"""The dashboard served in Space mode for tests: a fake Hub with two users, real OAuth sign-in, gradio clients.

The app runs in Space mode (SPACE_ID, SYSTEM=spaces and the OAUTH_* variables gradio expects), so gradio mounts its
real OAuth routes. Users sign in through them for real: /login/huggingface → the fake Hub's OpenID provider
(fake_hub_spaces.py) → /login/callback, where gradio and authlib exchange the code, verify the id_token and store the
session; the test then carries that session cookie with gradio_client.
"""

from __future__ import annotations

import io
import logging
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from gradio_client import Client

from .fake_hub import FakeHub

ALICE = "hf_AliceSecretToken0123456789abcdef"
BOB = "hf_oauth_BobSecretToken0123456789abcdef"
SECRETS = [ALICE, BOB]
MARK = "@@GRPO_DASHBOARD@@ "
SPACE_ENV = {
    "SYSTEM": "spaces",
    "SPACE_ID": "owner/grpo-dashboard",
    "OAUTH_CLIENT_ID": "fake-client-id",
    "OAUTH_CLIENT_SECRET": "fake-client-secret",
    "OAUTH_SCOPES": "openid profile jobs write-repos",
}


@contextmanager
def serve_space(data_dir: Path, hub_dir: Path, env: dict[str, str] | None = None) -> Iterator[dict[str, Any]]:
    """The app served in Space mode on 127.0.0.1 against a fake Hub with alice and bob; `env` adds variables.

    Yields {"url", "hub", "store", "demo", "log"}: `log` collects every library's log records at DEBUG.
    """
    import gradio.http_server
    import gradio.oauth
    import pytest
    from huggingface_hub import constants
    from huggingface_hub.utils import disable_progress_bars

    from grpo_dashboard.launch import backends
    from grpo_dashboard.store.db import Store
    from grpo_dashboard.ui import build_app

    hub = FakeHub(hub_dir, ALICE, "alice").start()
    hub.add_user(BOB, "bob")
    with pytest.MonkeyPatch.context() as mp:
        for key, value in {
            **SPACE_ENV,
            "GRPO_DASHBOARD_DATA_DIR": str(data_dir),
            "HF_ENDPOINT": hub.url,
            "GRPO_DASHBOARD_HF_POLL_S": "0.2",
            "GRPO_DASHBOARD_LAUNCH_LIMIT": "0",
            **(env or {}),
        }.items():
            mp.setenv(key, value)
        if "HF_TOKEN" not in (env or {}):
            mp.delenv("HF_TOKEN", raising=False)
        for key in ("OAUTH_CLIENT_ID", "OAUTH_CLIENT_SECRET", "OAUTH_SCOPES"):  # gradio.oauth read them at import
            mp.setattr(gradio.oauth, key, SPACE_ENV[key])
        mp.setattr(gradio.oauth, "OPENID_PROVIDER_URL", hub.url)
        mp.setattr(gradio.http_server, "watchfn_spaces", lambda reloader: None)  # Spaces hot reload needs `spaces`
        mp.setattr(constants, "HF_HUB_OFFLINE", False)
        mp.setattr(constants, "ENDPOINT", hub.url)
        mp.setattr(constants, "HF_TOKEN_PATH", str(data_dir / "no-saved-token"))
        # build_app turns implicit tokens off for the whole process on a Space; undo it after the module
        mp.setattr(constants, "HF_HUB_DISABLE_IMPLICIT_TOKEN", constants.HF_HUB_DISABLE_IMPLICIT_TOKEN)
        mp.delenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", raising=False)
        disable_progress_bars()
        log = io.StringIO()
        log_handler = logging.StreamHandler(log)
        root = logging.getLogger()
        root.addHandler(log_handler)
        mp.setattr(root, "level", logging.DEBUG)
        # Importing trackio (another test may have) sets the httpx and httpx2 loggers to WARNING: their request
        # lines (huggingface_hub's calls go through httpx2) are records the token checks read.
        for name in ("httpx", "httpx2"):
            mp.setattr(logging.getLogger(name), "level", logging.DEBUG)
        store = Store()
        demo = build_app(store, monitor=False)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
        try:
            yield {"url": url, "hub": hub, "store": store, "demo": demo, "log": log}
        finally:
            root.removeHandler(log_handler)
            backends.restart()
            demo.close()
            hub.stop()


def sign_in(url: str, user: str) -> str:
    """Sign in through gradio's real OAuth routes and the fake provider; returns the session cookie header."""
    with httpx.Client(follow_redirects=False, timeout=30) as http:
        start = http.get(url + "login/huggingface")
        assert start.status_code in (302, 307), start.text
        state_cookie = start.headers["set-cookie"].split(";")[0]
        authorize = http.get(start.headers["location"] + f"&login_as={user}")
        assert authorize.status_code == 302, authorize.text
        done = http.get(authorize.headers["location"], headers={"Cookie": state_cookie})
        assert done.status_code in (302, 307), done.text
        return done.headers["set-cookie"].split(";")[0]


def space_clients(url: str) -> dict[str, Client]:
    """alice and bob signed in (session cookies), an anonymous visitor, and an API client with bob's token only."""
    return {
        "alice": Client(url, verbose=False, headers={"Cookie": sign_in(url, "alice")}),
        "bob": Client(url, verbose=False, headers={"Cookie": sign_in(url, "bob")}),
        "anonymous": Client(url, verbose=False),
        "bob-api": Client(url, verbose=False, oauth_token=BOB),
    }


def space_fixtures(name: str, env: dict[str, str] | None = None) -> tuple[Any, Any, Any, Any]:
    """The module fixtures of a test file against one Space-mode app: (module_data, data_dir, served, clients).

    Assign them at module level: `module_data, data_dir, served, clients = space_fixtures("policy")`.
    """
    import pytest

    @pytest.fixture(scope="module")
    def module_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
        return tmp_path_factory.mktemp(f"{name}-data")

    @pytest.fixture(autouse=True)
    def data_dir(module_data: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
        monkeypatch.setenv("GRPO_DASHBOARD_DATA_DIR", str(module_data))
        return module_data

    @pytest.fixture(scope="module")
    def served(module_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
        with serve_space(module_data, tmp_path_factory.mktemp("hub"), env) as app:
            yield app

    @pytest.fixture(scope="module")
    def clients(served: dict[str, Any]) -> dict[str, Client]:
        return space_clients(served["url"])

    return module_data, data_dir, served, clients
