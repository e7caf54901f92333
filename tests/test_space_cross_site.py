"""Another site's page acting as a signed-in visitor of the Space, for real: the app in Space mode behind a TLS front
under its Space host name, an attacker's page on https://evil.example, and headless Chromium with third-party cookies
allowed carrying alice's session cookie (`SameSite=None`) to the Space.

gradio restricts cross-origin requests only when the Host is localhost; behind `<owner>-<space>.hf.space` it granted
any Origin with credentials, and such a page read alice's runs and live stream, renamed her run, added a note and
launched an a100-large job in her namespace. `grpo_dashboard/ui/origin.py` refuses it; these tests attack the app and
check that the Space's own page, navigations from anywhere, API clients and local mode still work.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import gradio as gr
import httpx
import pytest
import yaml
from gradio_client import Client

from grpo_dashboard import settings
from grpo_dashboard.spec import forms, presets
from grpo_dashboard.store import ingest
from grpo_dashboard.store.db import Run
from grpo_dashboard.ui import origin
from grpo_dashboard.ui.serving import DashboardBlocks

from .conftest import free_port
from .space_harness import ALICE, serve_space
from .store_helpers import append_log
from .test_ui_browser import CHROMIUM, CHROMIUM_ARGS
from .tls_front import TlsFront, TlsSite, self_signed

HOST = "owner-grpo-dashboard.hf.space"
EVIL = "evil.example"
EMBEDDER = "huggingface.co"  # the Space page that embeds the app in an iframe
CUSTOM = "https://grpo.example.com"  # a custom domain the owner allows
RUN = "alice-run"
PREFLIGHT = {
    "Origin": f"https://{EVIL}",
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "content-type",
}

# fetch/EventSource as a page's script calls the app: `call` runs a gradio endpoint through /gradio_api/call (the
# POST, then the GET of its result stream); `live` opens the Run detail stream. Failures come back as {error}.
PAGE_JS = """
async function call(space, api, data) {
  try {
    const post = await fetch(space + '/gradio_api/call/' + api, {method: 'POST', credentials: 'include',
      headers: {'Content-Type': 'application/json'}, body: JSON.stringify({data})});
    const {event_id} = await post.json();
    const result = await fetch(space + '/gradio_api/call/' + api + '/' + event_id, {credentials: 'include'});
    return {status: result.status, text: await result.text()};
  } catch (e) { return {error: String(e)}; }
}
function live(space, run) {
  return new Promise(resolve => {
    const es = new EventSource(space + '/grpo/live?run=' + encodeURIComponent(run), {withCredentials: true});
    const got = e => { es.close(); resolve({event: e.type, text: e.data}); };
    es.addEventListener('snapshot', got);
    es.addEventListener('refused', got);
    es.onerror = () => { es.close(); resolve({error: 'EventSource failed'}); };
  });
}
"""

ATTACK_PAGE = """<!doctype html><html><body><h1>Free GPUs</h1><script>
%s
const C = %s;
(async () => {
  const results = {};
  results.runs = await call(C.space, 'runs_table', [[], '']);
  results.live = await live(C.space, C.run);
  try {  // the light page's sidebar list of the visitor's runs
    const list = await fetch(C.space + '/grpo/runs', {credentials: 'include'});
    results.list = {status: list.status, text: await list.text()};
  } catch (e) { results.list = {error: String(e)}; }
  try {  // the light page's completions of a run
    const samples = await fetch(C.space + '/grpo/samples?run=' + C.run, {credentials: 'include'});
    results.samples = {status: samples.status, text: await samples.text()};
  } catch (e) { results.samples = {error: String(e)}; }
  try {  // the spec fields two runs differ in
    const diff = await fetch(C.space + '/grpo/spec_diff?runs=' + C.run + ',' + C.run, {credentials: 'include'});
    results.diff = {status: diff.status, text: await diff.text()};
  } catch (e) { results.diff = {error: String(e)}; }
  results.rename = await call(C.space, 'rename_run', [C.run, 'renamed by evil.example']);
  results.note = await call(C.space, 'note_run', [C.run, 'note from evil.example']);
  results.tags = await call(C.space, 'tag_run', [C.run, 'tagged-by-evil']);
  results.launch = await call(C.space, 'launch', C.launch);
  try {  // the form-style variant: no preflight, the browser sends it whatever CORS says
    await fetch(C.space + '/gradio_api/call/rename_run', {method: 'POST', mode: 'no-cors', credentials: 'include',
      headers: {'Content-Type': 'text/plain'}, body: JSON.stringify({data: [C.run, 'renamed blind']})});
    results.blind = 'sent';
  } catch (e) { results.blind = String(e); }
  window.results = results;
})();
</script></body></html>"""

EMBED_PAGE = """<!doctype html><html><body><h1>owner/grpo-dashboard</h1>
<iframe src="%s/?__theme=light" style="width: 1200px; height: 900px" allow="clipboard-write"></iframe>
</body></html>"""


def launch_data(demo: Any, flavor: str) -> list[Any]:
    """What the New run form sends to /launch for the smoke preset as a Hugging Face Jobs run on `flavor`."""
    spec = yaml.safe_load(presets.preset_yaml(presets.DEFAULT_PRESET))
    spec["name"] = "free-gpus"
    spec["backend"] = {"kind": "hf_jobs", "flavor": flavor, "timeout": "10m"}
    text = yaml.safe_dump(spec, sort_keys=False)
    values = forms.values_from_yaml(text)
    return [
        *[
            {"headers": list(forms.REWARD_COLUMNS), "data": values[k]} if k == "rewards" else values[k]
            for k in demo.form_keys
        ],
        text,
    ]


@pytest.fixture(scope="module")
def space(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The Space behind its TLS front (`origin` = https://HOST:PORT), alice's finished run with metrics, and the
    other sites' pages (evil.example, huggingface.co) on a second TLS server."""
    certs = tmp_path_factory.mktemp("certs")
    cert, key = self_signed(certs, [HOST, EVIL, EMBEDDER])
    front = TlsFront(cert, key).start()
    own = f"https://{HOST}:{front.port}"
    others = TlsSite(cert, key, {}).start()
    data = tmp_path_factory.mktemp("cross-site-data")
    env = {"SPACE_HOST": f"{HOST}:{front.port}", settings.ALLOWED_ORIGINS_ENV: CUSTOM}
    try:
        with serve_space(data, tmp_path_factory.mktemp("hub"), env) as app:
            front.target = int(app["url"].rstrip("/").rsplit(":", 1)[1])
            run_dir = data / "runs" / RUN
            run_dir.mkdir(parents=True)
            app["store"].insert_run(
                Run(
                    id=RUN,
                    name=RUN,
                    spec_yaml="name: x\n",
                    backend="hf_jobs",
                    status="completed",
                    created_at=time.time(),
                    run_dir=str(run_dir),
                    owner="alice",
                )
            )
            append_log(run_dir / "metrics.jsonl", range(1, 4), reward=lambda s: 0.1 * s)
            ingest.ingest_file(app["store"], RUN, run_dir / "metrics.jsonl")
            config = {"space": own, "run": RUN, "launch": launch_data(app["demo"], "a100-large")}
            others.pages["/attack.html"] = ATTACK_PAGE % (PAGE_JS, json.dumps(config))
            others.pages["/spaces/owner/grpo-dashboard"] = EMBED_PAGE % own
            yield {**app, "front": front, "origin": own, "others": f":{others.port}"}
    finally:
        others.stop()
        front.stop()


def _cors(response: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k.startswith("access-control-allow")}


def test_a_foreign_origin_gets_no_cors_grant_under_the_space_host(space: dict[str, Any]) -> None:
    """The finding's curl, with the Space's Host header: gradio answered the preflight with the attacker's origin and
    credentials allowed. Now every data route refuses a foreign origin (preflight or not), an opaque `null` one, and
    cross-site requests without Origin (an `<img>`, a `<script>`, a form GET; `same-site`: another hf.space Space)."""
    url, host = space["url"], {"Host": HOST}
    preflight = httpx.options(url + "gradio_api/call/launch", headers={**host, **PREFLIGHT})
    assert preflight.status_code == 403 and not _cors(preflight), (preflight.status_code, _cors(preflight))
    reason = preflight.json()["error"]
    assert f"https://{EVIL}" in reason and f"only https://{HOST}:" in reason, reason
    foreign = [
        ("OPTIONS", PREFLIGHT),
        ("GET", {"Origin": f"https://{EVIL}"}),
        ("POST", {"Origin": "null", "Content-Type": "text/plain"}),
        ("GET", {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"}),
        ("GET", {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"}),
        ("GET", {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "iframe"}),
    ]
    routes = [
        "gradio_api/call/launch",
        "gradio_api/queue/join",
        "gradio_api/queue/data?session_hash=x",
        "gradio_api/upload",
        "gradio_api/file=app.py",
        "config",
        "gradio_api/info",
        f"grpo/live?run={RUN}",
        "grpo/runs",
        f"grpo/samples?run={RUN}",
        f"grpo/spec_diff?runs={RUN},{RUN}-other",
        "grpo/static/live.js",
    ]
    for route in routes:
        answers = [
            httpx.request(method, url + route, headers={**host, **headers}, content=b"{}" * (method == "POST"))
            for method, headers in foreign
        ]
        assert [(a.status_code, _cors(a)) for a in answers] == [(403, {})] * len(answers), route


def test_the_spaces_own_origin_navigations_and_api_clients_still_pass(space: dict[str, Any]) -> None:
    """The Space's own origin and the allowed custom domain get gradio's answer (their CORS grant included); links,
    the OAuth redirect and iframes navigate to the pages from any site; a client with a Bearer token and no Origin (no
    ambient credential, so nothing to forge) reads its own runs."""
    url, host = space["url"], {"Host": HOST}
    for allowed in (space["origin"], CUSTOM):
        answer = httpx.options(url + "gradio_api/call/runs_table", headers={**host, **PREFLIGHT, "Origin": allowed})
        assert answer.status_code == 200 and _cors(answer)["access-control-allow-origin"] == allowed
        info = httpx.get(url + "gradio_api/info", headers={**host, "Origin": allowed, "Sec-Fetch-Site": "same-origin"})
        assert info.status_code == 200 and "runs_table" in info.text
    navigate = {**host, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}
    for page in ("", "?__theme=light", "login/huggingface", "login/callback?code=stale&state=stale", "logout"):
        for dest in ("document", "iframe"):
            answer = httpx.get(url + page, headers={**navigate, "Sec-Fetch-Dest": dest})
            assert answer.status_code in (200, 302, 307), (page, dest, answer.status_code, answer.text[:200])
    # a top-level form GET navigation may even carry an Origin (some browsers send one): the page can't read the answer
    answer = httpx.get(url, headers={**navigate, "Origin": f"https://{EVIL}"})
    assert answer.status_code == 200 and not _cors(answer)
    assert httpx.get(url + "gradio_api/info", headers=host).status_code == 200  # curl, scripts
    table = Client(url, verbose=False, oauth_token=ALICE).predict([], "", api_name="/runs_table")
    assert [row[-1] for row in table["data"]] == [RUN]


def test_the_rule_and_its_settings() -> None:
    """`origin.refusal` case by case, a WebSocket refused, a wildcard CORS grant stripped, and the allowed origins
    read from SPACE_HOST and the optional variable."""
    allowed = ("https://owner-grpo-dashboard.hf.space",)
    cases = [
        ({b"origin": b"https://owner-grpo-dashboard.hf.space"}, "POST", "/gradio_api/queue/join", None),
        ({b"origin": b"https://OWNER-grpo-dashboard.hf.space:443"}, "POST", "/gradio_api/queue/join", None),
        ({b"origin": b"https://owner-grpo-dashboard.hf.space.evil.example"}, "POST", "/config", "Origin"),
        ({b"origin": b"http://owner-grpo-dashboard.hf.space"}, "GET", "/config", "Origin"),
        ({b"origin": b"https://other-space.hf.space", b"sec-fetch-site": b"same-site"}, "GET", "/config", "Origin"),
        ({b"sec-fetch-site": b"cross-site", b"sec-fetch-mode": b"navigate"}, "GET", "/", None),
        ({b"sec-fetch-site": b"cross-site", b"sec-fetch-mode": b"navigate"}, "POST", "/", "cross-site"),
        ({b"sec-fetch-site": b"cross-site", b"sec-fetch-mode": b"navigate"}, "GET", "/grpo/live", "cross-site"),
        ({b"sec-fetch-site": b"cross-site", b"sec-fetch-mode": b"no-cors"}, "GET", "/theme.css", "cross-site"),
        ({b"sec-fetch-site": b"same-origin"}, "GET", "/gradio_api/file=x", None),
        ({b"sec-fetch-site": b"none", b"sec-fetch-mode": b"navigate"}, "GET", "/gradio_api/info", None),
        ({}, "POST", "/gradio_api/call/launch", None),
    ]
    for headers, method, path, refused in cases:
        reason = origin.refusal(headers, method, path, allowed)
        assert (reason is None) == (refused is None) and (refused or "") in (reason or ""), (headers, path, reason)
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def star(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"access-control-allow-origin", b"*"),
                    (b"access-control-allow-credentials", b"true"),
                    (b"content-length", b"0"),
                ],
            }
        )

    guard = origin.SameOrigin(star, allowed)
    asyncio.run(
        guard(
            {"type": "websocket", "path": "/gradio_api/ws", "headers": [(b"origin", b"https://evil.example")]},
            None,
            send,
        )
    )
    assert sent[-1]["type"] == "websocket.close" and sent[-1]["code"] == 1008
    own = [(b"origin", allowed[0].encode())]
    asyncio.run(guard({"type": "http", "method": "GET", "path": "/config", "headers": own}, None, send))
    assert sent[-1]["headers"] == [(b"content-length", b"0")]  # a wildcard grant never leaves
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPACE_HOST", "owner-grpo-dashboard.hf.space, grpo.example.com")
        mp.setenv(settings.ALLOWED_ORIGINS_ENV, "https://Team.example:8443/, extra.example,,")
        assert settings.allowed_origins() == (
            "https://owner-grpo-dashboard.hf.space",
            "https://grpo.example.com",
            "https://team.example:8443",
            "https://extra.example",
        )
        mp.setenv(settings.ALLOWED_ORIGINS_ENV, "https://grpo.example.com/app")
        with pytest.raises(ValueError, match="not an origin"):
            settings.allowed_origins()


def test_local_mode_is_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not on a Space nothing is added: gradio's own localhost rule answers as before."""
    for name in ("SPACE_ID", "SYSTEM", "SPACE_HOST"):
        monkeypatch.delenv(name, raising=False)
    with DashboardBlocks() as demo:
        gr.Textbox()
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True)
    try:
        assert all(m.cls is not origin.SameOrigin for m in demo.server_app.user_middleware)
        foreign = httpx.options(url + "gradio_api/info", headers=PREFLIGHT)
        assert foreign.status_code == 200 and "access-control-allow-origin" not in foreign.headers
        local = httpx.get(url + "config", headers={"Origin": "http://localhost:7860"})
        assert local.status_code == 200 and local.headers["access-control-allow-origin"] == "http://localhost:7860"
    finally:
        demo.close()


@pytest.fixture(scope="module")
def browser(space: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Chromium resolving the three sites to 127.0.0.1, in a profile that allows third-party cookies (Playwright's
    new_context is incognito-like and blocks them, so a persistent profile with that preference)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium")
    profile = tmp_path_factory.mktemp("chromium-profile")
    (profile / "Default").mkdir()
    (profile / "Default" / "Preferences").write_text(json.dumps({"profile": {"cookie_controls_mode": 0}}))
    rules = ", ".join(f"MAP {name} 127.0.0.1" for name in (HOST, EVIL, EMBEDDER))
    with sync_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            ignore_https_errors=True,
            args=[*CHROMIUM_ARGS, f"--host-resolver-rules={rules}", "--ignore-certificate-errors"],
        )
        context.set_default_timeout(90_000)
        try:
            yield context
        finally:
            context.close()


@pytest.mark.browser
def test_a_cross_site_page_cannot_act_as_a_signed_in_visitor(space: dict[str, Any], browser: Any) -> None:
    """alice signs in through the real OAuth flow (the provider's page sends her back cross-site to /login/callback),
    her page and the huggingface.co iframe work; then she opens evil.example, whose script tries what the finding
    did. Her browser does send her session cookie along (seen at the TLS front); the Space refuses it all."""
    own, page = space["origin"], browser.new_page()
    page.goto(own + "/login/huggingface")  # on to the provider, which asks who signs in (?login_as)
    page.evaluate(
        "u => { const a = document.createElement('a'); a.href = u; a.id = 'authorize'; "
        "a.textContent = 'Authorize'; document.body.append(a); }",
        page.url + "&login_as=alice",
    )
    page.click("#authorize")
    page.wait_for_url(lambda u: u.startswith(own + "/") and "/login/" not in u)
    page.wait_for_function("() => (document.querySelector('#who')?.innerText || '').includes('alice')")
    mine = page.evaluate(
        f"async (c) => {{ {PAGE_JS}; return [await call(c.space, 'runs_table', [[], '']), "
        "await live(c.space, c.run)]; }",
        {"space": own, "run": RUN},
    )
    assert RUN in mine[0].get("text", ""), mine[0]
    assert mine[1].get("event") == "snapshot", mine[1]

    embedder = page.goto(f"https://{EMBEDDER}{space['others']}/spaces/owner/grpo-dashboard")
    assert embedder is not None and embedder.ok
    frame = page.frame_locator("iframe")
    frame.locator("#who").filter(has_text="alice").wait_for()  # the iframe's own calls carry the Space's origin

    page.goto(f"https://{EVIL}{space['others']}/attack.html")
    page.wait_for_function("() => window.results !== undefined")
    results = page.evaluate("() => window.results")
    for name in ("runs", "list", "samples", "diff", "rename", "note", "tags", "launch"):
        assert "text" not in results[name] and "Failed to fetch" in results[name]["error"], (name, results[name])
    assert results["live"] == {"error": "EventSource failed"}, results["live"]
    store, hub = space["store"], space["hub"]
    assert [r.id for r in store.list_runs()] == [RUN] and store.get_run(RUN).name == RUN
    assert RUN not in store.notes() and not hub.jobs
    assert "tagged-by-evil" not in store.get_run(RUN).spec_yaml

    evil = [r for r in space["front"].requests() if r["headers"].get("origin", "").startswith(f"https://{EVIL}")]
    seen = {(r["method"], r["target"].split("?")[0]) for r in evil}
    apis = ("runs_table", "rename_run", "note_run", "tag_run", "launch")
    assert {("OPTIONS", f"/gradio_api/call/{api}") for api in apis} <= seen, seen
    assert not any(r["method"] == "POST" and "json" in r["headers"].get("content-type", "") for r in evil)
    credentialed = {r["target"].split("?")[0] for r in evil if "session=" in r["headers"].get("cookie", "")}
    assert {
        "/grpo/live",
        "/grpo/runs",
        "/grpo/samples",
        "/grpo/spec_diff",
        "/gradio_api/call/rename_run",
    } <= credentialed, seen  # third-party cookies were sent
    page.close()
