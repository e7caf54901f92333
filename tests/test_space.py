"""The dashboard as a Hugging Face Space: sign-in, each user's runs on their own account, nobody else's.

The app runs in Space mode (SPACE_ID, SYSTEM=spaces and the OAUTH_* variables gradio expects), so gradio mounts its
real OAuth routes. Users sign in through them for real: /login/huggingface → the fake Hub's OpenID provider
(fake_hub_spaces.py) → /login/callback, where gradio and authlib exchange the code, verify the id_token and store the
session; the test then carries that session cookie with gradio_client. A third kind of caller is an API client with
only a token (`Client(url, oauth_token=...)`), whom the dashboard identifies with the Hub's whoami. Handlers are also
called directly with constructed gr.OAuthProfile / gr.OAuthToken objects. Jobs run on the fake Hub (scripted lines).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gradio as gr
import httpx
import pytest
import yaml
from gradio_client import Client

from grpo_dashboard import settings
from grpo_dashboard.errors import SpecError
from grpo_dashboard.launch import hub_client
from grpo_dashboard.space import access
from grpo_dashboard.spec import forms, presets
from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.store.db import ACTIVE, Store

from .conftest import wait_for
from .fake_hub import Plan
from .space_harness import ALICE, BOB, MARK, SECRETS, SPACE_ENV, serve_space, space_clients


@pytest.fixture(scope="module")
def module_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("space-data")


@pytest.fixture(autouse=True)
def data_dir(module_data: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """One data directory for the module: the served app's store and run directories live there."""
    monkeypatch.setenv("GRPO_DASHBOARD_DATA_DIR", str(module_data))
    return module_data


@pytest.fixture(scope="module")
def space_app(module_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The app served in Space mode against a fake Hub with two users, alice and bob."""
    with serve_space(module_data, tmp_path_factory.mktemp("hub")) as served:
        yield served


@pytest.fixture(scope="module")
def clients(space_app: dict[str, Any]) -> dict[str, Client]:
    """alice and bob signed in (session cookies), an anonymous visitor, and an API client with bob's token only."""
    return space_clients(space_app["url"])


def _lines(steps: int = 6) -> list[str]:
    recs: list[dict[str, Any]] = [{"v": 1, "type": "event", "event": "started", "time": 1.0, "max_steps": 100}]
    recs += [
        {
            "v": 1,
            "type": "log",
            "split": "train",
            "step": s,
            "time": 1.0 + s,
            "max_steps": 100,
            "metrics": {"reward": s / 10, "kl": 0.01},
        }
        for s in range(1, steps + 1)
    ]
    return ["Installed 87 packages", *(MARK + json.dumps(r) for r in recs), "still training"]


def jobs_yaml(name: str) -> str:
    """The smoke preset as a Hugging Face Jobs run (namespace left empty: the Space fills in the user's)."""
    spec = yaml.safe_load(presets.preset_yaml(presets.DEFAULT_PRESET))
    spec["name"] = name
    spec["backend"] = {"kind": "hf_jobs", "flavor": "cpu-basic", "timeout": "10m"}
    return yaml.safe_dump(spec, sort_keys=False)


def launch_args(demo: Any, text: str) -> list[Any]:
    values = forms.values_from_yaml(text)
    return [
        *[
            {"headers": list(forms.REWARD_COLUMNS), "data": values[k]} if k == "rewards" else values[k]
            for k in demo.form_keys
        ],
        text,
    ]


def ui_launch(space_app: dict[str, Any], client: Client, name: str) -> str:
    """Launch a held Jobs run through the UI's /launch endpoint; returns its id."""
    space_app["hub"].plans.append(Plan(lines=_lines(), hold_at=3))
    out = client.predict(*launch_args(space_app["demo"], jobs_yaml(name)), api_name="/launch")
    assert "Launched" in out[0], out[0]
    return out[-1]


@pytest.fixture(scope="module")
def two_runs(space_app: dict[str, Any], clients: dict[str, Client]) -> dict[str, str]:
    """alice launches from her session, bob through the API with his token; both jobs stay running."""
    ids = {
        "alice": ui_launch(space_app, clients["alice"], "alice-run"),
        "bob": ui_launch(space_app, clients["bob-api"], "bob-run"),
    }
    store = space_app["store"]
    wait_for(
        lambda: all(store.get_run(i).status == "running" and store.get_run(i).n_records for i in ids.values()),
        timeout=60,
    )
    return ids


def table_ids(client: Client) -> list[str]:
    return [row[-1] for row in client.predict([], api_name="/runs_table")["data"]]


def choice_ids(client: Client) -> list[str]:
    """The run pickers' choices (a session's first call; an unchanged list comes back as a skip: no choices)."""
    detail, compare = client.predict(api_name="/run_choices")
    assert detail == compare
    return [value for _, value in detail.get("choices") or []]


# --- sign-in and launching ---------------------------------------------------------------------------------------
def test_anonymous_launch_is_refused_with_a_clear_message(
    space_app: dict[str, Any], clients: dict[str, Client]
) -> None:
    before = len(space_app["store"].list_runs())
    with pytest.raises(Exception, match="Sign in with Hugging Face") as err:
        clients["anonymous"].predict(*launch_args(space_app["demo"], jobs_yaml("anon")), api_name="/launch")
    assert "own account" in str(err.value)
    assert len(space_app["store"].list_runs()) == before
    assert "not signed in" in clients["anonymous"].predict(api_name="/who")


def test_session_and_token_identify_the_user(clients: dict[str, Client]) -> None:
    assert "signed in as **alice**" in clients["alice"].predict(api_name="/who")
    assert "signed in as **bob**" in clients["bob"].predict(api_name="/who")
    assert "signed in as **bob**" in clients["bob-api"].predict(api_name="/who")


def test_a_token_the_hub_rejects_is_refused_without_echoing_it(space_app: dict[str, Any]) -> None:
    forged = "hf_ForgedToken0123456789abcdefgh"
    with pytest.raises(Exception, match="rejected the token") as err:
        Client(space_app["url"], verbose=False, oauth_token=forged).predict([], api_name="/runs_table")
    assert forged not in str(err.value)


def test_each_run_goes_to_its_users_account(space_app: dict[str, Any], two_runs: dict[str, str]) -> None:
    hub, store = space_app["hub"], space_app["store"]
    for user, token in (("alice", ALICE), ("bob", BOB)):
        run = store.get_run(two_runs[user])
        assert run.owner == user and run.external_id.startswith(f"{user}/")
        job = hub.jobs[run.external_id.split("/", 1)[1]]
        assert job.namespace == user and job.spec["secrets"]["HF_TOKEN"] == token
        assert f"{user}/jobs-artifacts" in hub.buckets


# --- nobody else's runs --------------------------------------------------------------------------------------------
def test_lists_show_only_the_users_own_runs(clients: dict[str, Client], two_runs: dict[str, str]) -> None:
    for who, owner in (("alice", "alice"), ("bob", "bob"), ("bob-api", "bob")):
        assert table_ids(clients[who]) == [two_runs[owner]]
        assert choice_ids(clients[who]) == [two_runs[owner]]
    assert table_ids(clients["anonymous"]) == [] and choice_ids(clients["anonymous"]) == []


def test_initial_page_holds_no_run(space_app: dict[str, Any], two_runs: dict[str, str]) -> None:
    config = httpx.get(space_app["url"] + "config", timeout=30).text
    assert not any(run_id in config for run_id in two_runs.values())


def detail_args(run_id: str) -> list[Any]:
    return [run_id, 0.0, False, "step", True, None, "reward", True]


def test_another_users_run_cannot_be_viewed(clients: dict[str, Client], two_runs: dict[str, str]) -> None:
    bob_run = two_runs["bob"]
    for who in ("alice", "anonymous"):
        for api in ("/detail_render", "/detail_poll"):
            out = clients[who].predict(*detail_args(bob_run), api_name=api)
            assert "among your runs" in json.dumps(out[0])
            assert not any("bob-run" in json.dumps(o) or "reward" in json.dumps(o) for o in out[1:] if o)
        for ref in (bob_run, bob_run[:12], "bob-run"):
            with pytest.raises(Exception, match="among your runs"):
                clients[who].predict(ref, api_name="/open_run_by_ref")
        _, plot, diff = clients[who].predict(
            [bob_run, two_runs["alice"]], None, 0.0, False, "step", api_name="/compare"
        )
        assert "bob-run" not in json.dumps(plot) and "bob-run" not in json.dumps(diff)
        cost = clients[who].predict(bob_run, 3.6, api_name="/forecast_cost")
        assert "among your runs" in cost and "$" not in cost
    out = clients["bob"].predict(*detail_args(bob_run), api_name="/detail_render")
    assert "running" in out[0] and "name: bob-run" in json.dumps(out)


def test_another_users_run_cannot_be_canceled(
    space_app: dict[str, Any], clients: dict[str, Client], two_runs: dict[str, str]
) -> None:
    store, hub = space_app["store"], space_app["hub"]
    with pytest.raises(Exception, match="among your runs"):
        clients["alice"].predict(two_runs["bob"], api_name="/cancel_run")
    with pytest.raises(Exception, match="Sign in"):  # before the run id is even looked up
        clients["anonymous"].predict(two_runs["bob"], api_name="/cancel_run")
    assert store.get_run(two_runs["bob"]).status in ACTIVE
    assert not hub.requests_to("POST", f"/api/jobs/bob/{store.get_run(two_runs['bob']).external_id[4:]}/cancel")


def test_another_users_run_cannot_be_tagged_renamed_or_annotated(
    space_app: dict[str, Any], clients: dict[str, Client], two_runs: dict[str, str]
) -> None:
    store = space_app["store"]
    bob_run = two_runs["bob"]
    before = store.get_run(bob_run).spec_yaml, store.get_run(bob_run).name, store.notes().get(bob_run)
    calls = (("/tag_run", [bob_run, "pwned"]), ("/rename_run", [bob_run, "pwned"]), ("/note_run", [bob_run, "x"]))
    for api, args in calls:
        with pytest.raises(Exception, match="among your runs"):
            clients["alice"].predict(*args, api_name=api)
        with pytest.raises(Exception, match="Sign in"):
            clients["anonymous"].predict(*args, api_name=api)
    with pytest.raises(Exception, match="over the limit of 4,000"):  # the policy's text cap, before the handler
        clients["bob"].predict(bob_run, "t, " * 3000, api_name="/tag_run")
    assert (store.get_run(bob_run).spec_yaml, store.get_run(bob_run).name, store.notes().get(bob_run)) == before
    assert "`mine`" in clients["bob"].predict(bob_run, "mine", api_name="/tag_run")  # the owner may
    assert "mine" in RunSpec.from_yaml(store.get_run(bob_run).spec_yaml).tags


def handler(demo: Any, api_name: str) -> Any:
    return next(f.fn for f in demo.fns.values() if f.api_name == api_name)


def test_handlers_called_directly_with_oauth_objects(space_app: dict[str, Any], two_runs: dict[str, str]) -> None:
    demo = space_app["demo"]
    alice = gr.OAuthProfile({"name": "Alice", "preferred_username": "alice", "profile": "", "picture": ""})
    token = gr.OAuthToken(token=ALICE, scope="openid profile jobs", expires_at=0)
    bob_run = two_runs["bob"]
    with pytest.raises(gr.Error, match="among your runs"):
        handler(demo, "cancel_run")(alice, token, bob_run)
    with pytest.raises(gr.Error, match="among your runs"):
        handler(demo, "open_run_by_ref")(alice, token, "bob-run")
    status = next(f.outputs[0] for f in demo.fns.values() if f.api_name == "detail_poll")
    assert "among your runs" in handler(demo, "detail_poll")(alice, token, *detail_args(bob_run), {})[status]["value"]
    assert [r[-1] for r in handler(demo, "runs_table")(alice, token, []).values.tolist()] == [two_runs["alice"]]
    assert handler(demo, "runs_table")(None, None, []).empty
    with pytest.raises(gr.Error, match="Sign in"):
        handler(demo, "launch")(None, None, *launch_args(demo, jobs_yaml("x")))


def test_owner_cancels_own_run_with_own_token(
    space_app: dict[str, Any], clients: dict[str, Client], two_runs: dict[str, str]
) -> None:
    store, hub = space_app["store"], space_app["hub"]
    run = store.get_run(two_runs["bob"])
    clients["bob"].predict(run.id, api_name="/cancel_run")
    cancels = hub.requests_to("POST", f"/api/jobs/bob/{run.external_id.split('/', 1)[1]}/cancel")
    assert [{k.lower(): v for k, v in r.headers.items()}["authorization"] for r in cancels] == [f"Bearer {BOB}"]
    wait_for(lambda: store.get_run(run.id).status == "canceled", timeout=30)
    assert store.get_run(two_runs["alice"]).status == "running"


def test_tokens_are_nowhere_on_disk_or_in_logs(
    space_app: dict[str, Any],
    clients: dict[str, Client],
    two_runs: dict[str, str],
    module_data: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    store: Store = space_app["store"]
    third = ui_launch(space_app, clients["alice"], "alice-second")  # launch, follow and cancel under capture
    try:
        wait_for(lambda: store.get_run(third).n_records, timeout=60)
    except AssertionError:
        raise AssertionError(str(store.get_run(third))) from None
    clients["alice"].predict(*detail_args(third), api_name="/detail_render")
    clients["alice"].predict(third, api_name="/cancel_run")
    wait_for(lambda: store.get_run(third).status == "canceled", timeout=30)
    store.connection().execute("PRAGMA wal_checkpoint(FULL)")
    files = [p for p in module_data.rglob("*") if p.is_file()]
    assert any(p.name.endswith(".db") for p in files) and any(p.name == "job.log" for p in files)
    for path in files:
        data = path.read_bytes()
        assert not any(secret.encode() in data for secret in SECRETS), path
    captured = capfd.readouterr()
    logged = space_app["log"].getvalue()
    assert "/api/jobs/alice" in logged and "/oauth/token" in logged  # the whole module's DEBUG records
    for text in (captured.out, captured.err, logged):
        assert not any(secret in text for secret in SECRETS)


# --- what the Space forbids ----------------------------------------------------------------------------------------
def test_local_backend_is_refused_on_a_space(space_app: dict[str, Any], clients: dict[str, Client]) -> None:
    demo = space_app["demo"]
    text = presets.preset_yaml(presets.DEFAULT_PRESET)  # the smoke preset runs on the local backend
    out = clients["alice"].predict(*launch_args(demo, text), api_name="/launch")
    assert "backend.kind" in out[0] and "disabled on this Space" in out[0]
    out = clients["alice"].predict(*launch_args(demo, text), api_name="/validate")
    assert "disabled on this Space" in out[0]
    assert not [r for r in space_app["store"].list_runs() if r.backend == "local"]


def test_preflight_checks_obey_the_space_rules(clients: dict[str, Client]) -> None:
    smoke = presets.preset_yaml(presets.DEFAULT_PRESET)  # local backend: fine for checks that start nothing
    for api, args in (("/inspect_dataset", [smoke]), ("/estimate_hardware", [smoke]), ("/check_rewards", [smoke, 2])):
        with pytest.raises(Exception, match="Sign in with Hugging Face"):
            clients["anonymous"].predict(*args, api_name=api)
    assert "prompt" in clients["alice"].predict(smoke, api_name="/inspect_dataset")
    leaky = smoke.replace("examples/data/smoke.jsonl", "/proc/self/environ")
    for api, args in (("/inspect_dataset", [leaky]), ("/estimate_hardware", [leaky]), ("/check_rewards", [leaky, 2])):
        with pytest.raises(Exception, match="Not on this Space: dataset.data_files") as err:
            clients["alice"].predict(*args, api_name=api)
        assert "OAUTH" not in str(err.value)
    spec = RunSpec.from_yaml(smoke)
    spec.rewards[0].builtin, spec.rewards[0].params = "python", {"code": "def reward(completions, **kw): 1/0"}
    with pytest.raises(Exception, match="runs your own Python code"):
        clients["alice"].predict(spec.to_yaml(), 2, api_name="/check_rewards")


@pytest.fixture
def on_space(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in SPACE_ENV.items():
        monkeypatch.setenv(key, value)
    for key in (settings.ALLOW_LOCAL_ENV, settings.ALLOW_CODE_ENV, settings.MAX_ACTIVE_ENV, settings.LAUNCH_LIMIT_ENV):
        monkeypatch.delenv(key, raising=False)


def test_spec_policy(on_space: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    spec = RunSpec.from_yaml(jobs_yaml("p"))
    assert access.spec_policy_errors(spec, presets.PROJECT_ROOT) == []  # examples/ data is fine
    evil = RunSpec.from_yaml(jobs_yaml("p"))
    evil.dataset.data_files = "/proc/self/environ"
    evil.rewards[0].function, evil.rewards[0].params = str(tmp_path / "r.py") + ":f", {}
    (tmp_path / "r.py").write_text("def f(completions, **kw): return [0.0]\n")
    evil.output_dir = "/tmp/x"
    fields = {e.field for e in access.spec_policy_errors(evil, presets.PROJECT_ROOT)}
    assert fields == {"dataset.data_files", "rewards[0].function", "output_dir"}
    inline = RunSpec.from_yaml(jobs_yaml("p"))
    inline.rewards[0].builtin = "python"
    assert [e.field for e in access.spec_policy_errors(inline)] == ["rewards[0].builtin"]
    monkeypatch.setenv(settings.ALLOW_CODE_ENV, "1")
    assert access.spec_policy_errors(inline) == []
    local = RunSpec.from_yaml(presets.preset_yaml(presets.DEFAULT_PRESET))
    assert [e.field for e in access.spec_policy_errors(local)] == ["backend.kind"]
    monkeypatch.setenv(settings.ALLOW_LOCAL_ENV, "yes")
    assert access.spec_policy_errors(local) == []
    for key in SPACE_ENV:
        monkeypatch.delenv(key)
    assert access.spec_policy_errors(evil) == []  # locally the machine's owner may do anything


def test_active_run_cap_and_launch_rate_limit(on_space: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(settings.MAX_ACTIVE_ENV, "1")
    monkeypatch.setenv(settings.LAUNCH_LIMIT_ENV, "2")
    monkeypatch.setenv(settings.LAUNCH_WINDOW_ENV, "60")
    store = Store(tmp_path / "cap.db")
    alice = access.User("alice", ALICE, True, "session")
    launched: list[str] = []

    def fake_launch(
        spec: RunSpec, store: Store, base_dir: Any = None, owner: Any = None, token: Any = None, backends: Any = None
    ) -> Any:
        from grpo_dashboard.launch.runs import make_run_id
        from grpo_dashboard.store.db import Run

        run = Run(
            id=make_run_id(spec.name),
            name=spec.name,
            spec_yaml="",
            backend="hf_jobs",
            status="failed",
            created_at=len(launched),
            run_dir=str(tmp_path),
            owner=owner,
        )
        store.insert_run(run)
        launched.append(run.id)
        return run

    monkeypatch.setattr(access.runs, "launch", fake_launch)
    access.LIMITER.reset()
    spec = RunSpec.from_yaml(jobs_yaml("capped"))
    access.launch(spec, store, alice)
    access.launch(spec, store, alice)
    with pytest.raises(access.NotAllowed, match=r"at most 2 per 60 s per user .* Try again in \d+ s"):
        access.launch(spec, store, alice)
    access.launch(spec, store, access.User("bob", BOB, True, "session"))  # limits are per user
    store.update_run(launched[0], status="running")
    access.LIMITER.reset()
    with pytest.raises(access.NotAllowed, match="You already have 1 queued or running runs"):
        access.launch(spec, store, alice)
    with pytest.raises(access.NotAllowed, match="Sign in"):
        access.launch(spec, store, access.ANONYMOUS)
    assert len(launched) == 3


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in (
        "SPACE_ID",
        "SYSTEM",
        settings.ALLOW_LOCAL_ENV,
        settings.ALLOW_CODE_ENV,
        settings.MAX_ACTIVE_ENV,
        settings.LAUNCH_LIMIT_ENV,
        settings.LAUNCH_WINDOW_ENV,
        settings.MAX_STREAMS_ENV,
    ):
        monkeypatch.delenv(key, raising=False)
    local = settings.Settings.from_env()
    assert not local.on_space and local.allow_local_backend and local.max_active_runs is None
    assert local.max_streams is None
    monkeypatch.setenv("SPACE_ID", "me/dash")
    hosted = settings.Settings.from_env()
    assert hosted.on_space and not hosted.allow_local_backend and not hosted.allow_custom_code
    assert (hosted.max_active_runs, hosted.launch_limit, hosted.launch_window_s, hosted.max_streams) == (2, 5, 600, 8)
    monkeypatch.setenv(settings.MAX_ACTIVE_ENV, "0")
    monkeypatch.setenv(settings.MAX_STREAMS_ENV, "3")
    assert settings.Settings.from_env().max_active_runs is None
    assert settings.Settings.from_env().max_streams == 3
    monkeypatch.setenv(settings.ALLOW_LOCAL_ENV, "maybe")
    with pytest.raises(ValueError, match="GRPO_DASHBOARD_ALLOW_LOCAL_BACKEND='maybe' is not a yes/no value"):
        settings.Settings.from_env()


def test_local_mode_uses_the_saved_token_not_gradios_mock(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("SPACE_ID", "SYSTEM"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HF_TOKEN", ALICE)
    mock = gr.OAuthToken(token=settings.MOCK_OAUTH_TOKEN, scope="openid profile", expires_at=0)
    profile = gr.OAuthProfile({"name": "A", "preferred_username": "alice", "profile": "", "picture": ""})
    user = access.current_user(profile, mock)
    assert (user.username, user.token) == ("alice", ALICE)
    assert access.current_user(None, None).token == ALICE
    assert ALICE not in repr(user)


def test_redact() -> None:
    text = f"token={ALICE} oauth={BOB} mine=secret-value-42 module hf_jobs_stream.py"
    out = access.redact(text, "secret-value-42")
    assert not any(s in out for s in [*SECRETS, "secret-value-42"])
    assert "hf_jobs_stream.py" in out and out.count("hf_***") == 3


def test_launch_with_a_spec_error_is_refused_before_reading_files(on_space: None) -> None:
    spec = RunSpec.from_yaml(jobs_yaml("p"))
    spec.dataset.data_files = "/etc/passwd"
    with pytest.raises(SpecError, match="Space's disk"):
        access.launch(spec, Store(), access.User("alice", ALICE, True, "session"))


def test_lookup_by_name_or_prefix_sees_only_own_runs(on_space: None, tmp_path: Path) -> None:
    from grpo_dashboard.store.db import Run

    store = Store(tmp_path / "names.db")
    for i, owner in enumerate(("alice", "bob", None)):  # bob's and the admin's are newer, with the same name
        store.insert_run(
            Run(
                id=f"shared-{owner}",
                name="shared",
                spec_yaml="",
                backend="hf_jobs",
                status="running",
                created_at=float(i),
                run_dir=str(tmp_path),
                owner=owner,
            )
        )
    alice, bob = access.User("alice", ALICE, True, "session"), access.User("bob", BOB, True, "session")
    assert access.find_run(store, "shared", alice).id == "shared-alice"
    assert access.find_run(store, "shared-", bob).id == "shared-bob"
    assert [r.id for r in access.visible_runs(store, access.ANONYMOUS)] == []
    with pytest.raises(access.AccessDenied) as foreign:
        access.get_run(store, "shared-bob", alice)
    with pytest.raises(access.AccessDenied) as missing:
        access.get_run(store, "no-such-run", alice)
    assert str(foreign.value).replace("shared-bob", "X") == str(missing.value).replace("no-such-run", "X")
    with pytest.raises(access.AccessDenied):
        access.cancel(store, "shared-None", alice)
    assert store.get_run("shared-None").status == "running"


def test_the_space_owners_token_is_never_used_for_a_user(on_space: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from grpo_dashboard.errors import BackendError

    monkeypatch.setenv("HF_TOKEN", ALICE)  # a Space secret of the owner's
    assert hub_client.saved_token() is None
    with pytest.raises(BackendError, match="sign in with Hugging Face"):
        hub_client.require_token(None)
    assert access.current_user(None, None) == access.ANONYMOUS
