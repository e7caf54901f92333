"""Who is asking and what they may see and do: the access layer every UI handler goes through (no gradio here).

On a Space (space.py) a request's user comes from the signed-in session (gradio's OAuth profile and token) or, for
API callers, from a Hugging Face token that the Hub itself vouches for (`whoami`). A user sees and controls only the
runs whose `owner` is their username; runs go to Hugging Face Jobs with their own token in their own namespace.
Locally there is one user: the machine's saved login, who sees every run.

Tokens live in memory only: `User.token` is never printed (`repr=False`), stored, written to a run's files or put in
a message, and `redact` removes anything token-shaped from text shown to users.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import re
import sys
import tempfile
import threading
import time
import weakref
from collections import OrderedDict, deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from grpo_dashboard.checks import sandbox
from grpo_dashboard.errors import BackendError, FieldError, RunNotFound, SpecError
from grpo_dashboard.launch import hub_client, runs
from grpo_dashboard.launch.backends import Backends, space_kinds, space_policy
from grpo_dashboard.redaction import redact as _redact_pattern
from grpo_dashboard.settings import MOCK_OAUTH_TOKEN, Settings
from grpo_dashboard.spec import jobfiles
from grpo_dashboard.spec.agent_spec import is_file_target
from grpo_dashboard.spec.presets import EXAMPLES_DIR, PROJECT_ROOT
from grpo_dashboard.spec.run_spec import ACCELERATE_CONFIGS, RunSpec
from grpo_dashboard.store.db import ACTIVE, Run, Store, data_dir

WHOAMI_TTL_S = 300.0
HUB_DATASET_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")
SIGN_IN = (
    "Sign in with Hugging Face (the button at the top of the page) to launch runs: on this Space every run "
    "goes to Hugging Face Jobs on your own account, billed to you, and only you can see it."
)


@dataclass(frozen=True)
class User:
    """The person behind a request. `username` None: anonymous (Space) or the local machine's user."""

    username: str | None
    token: str | None = field(default=None, repr=False, compare=False)
    signed_in: bool = False
    source: str = "anonymous"  # session | token | local | anonymous

    def label(self) -> str:
        """How the UI names this user."""
        if self.username:
            return f"signed in as **{self.username}**"
        return "not signed in" if self.source == "anonymous" else "local user"


ANONYMOUS = User(None)


class AccessDenied(RunNotFound):
    """The run is not the caller's (or does not exist: the two are answered alike, so nothing leaks)."""


class NotAllowed(PermissionError):
    """A refused action (not signed in, too many active runs, too many launches); the message says what to do."""


def redact(text: Any, *secrets: str | None) -> Any:
    """Text with every `hf_...` token (and each given secret, whatever its shape) replaced; non-strings pass."""
    if not isinstance(text, str):
        return text
    for secret in secrets:
        if secret and len(secret) >= 8:
            text = text.replace(secret, "hf_***")
    return _redact_pattern(text)


@functools.lru_cache(maxsize=8)
def _server_roots(data: str) -> list[tuple[str, str]]:
    roots = [
        (data, "<data dir>"),
        (str(PROJECT_ROOT), "<app>"),
        (tempfile.gettempdir(), "<tmp>"),
        (sys.prefix, "<python>"),
        (sys.base_prefix, "<python>"),
        (str(Path.home()), "~"),
    ]
    out: list[tuple[str, str]] = []
    for root, name in roots:
        for form in dict.fromkeys((root, os.path.realpath(root))):
            if len(form) > 1:
                out.append((form.rstrip("/"), name))
    return sorted(out, key=lambda pair: len(pair[0]), reverse=True)


def scrub_paths(text: Any) -> Any:
    """Text with the server's absolute directories (data dir, app, temp, Python, home) named instead of spelled out;
    what a Space shows its visitors says nothing about its file system. Non-strings pass."""
    if not isinstance(text, str):
        return text
    for root, name in _server_roots(str(data_dir())):
        text = text.replace(root, name)
    return text


def scrubbed(value: Any, token: str | None, paths: bool = True) -> Any:
    """`value` with every text in it (string keys too) redacted of tokens and, with `paths`, of the server's paths;
    lists, tuples and dicts are walked, anything else passes."""
    if isinstance(value, str):
        text = redact(value, token)
        return scrub_paths(text) if paths else text
    if isinstance(value, list):
        return [scrubbed(v, token, paths) for v in value]
    if isinstance(value, tuple):
        return tuple(scrubbed(v, token, paths) for v in value)
    if isinstance(value, dict):
        return {scrubbed(k, token, paths): scrubbed(v, token, paths) for k, v in value.items()}
    return value


# --- who is asking -----------------------------------------------------------------------------------------------
def _token_text(token: Any) -> str | None:
    value = getattr(token, "token", token)
    return value if isinstance(value, str) and value else None


def _profile_name(profile: Any) -> str | None:
    name = getattr(profile, "username", None)
    if name is None and isinstance(profile, dict):
        name = profile.get("preferred_username")
    return str(name) if name else None


class WhoamiCache:
    """Who a token belongs to, as the Hub said within the last `ttl_s` seconds; at most `size` tokens (by hash)."""

    def __init__(self, ttl_s: float = WHOAMI_TTL_S, size: int = 1024) -> None:
        self.ttl_s, self.size = ttl_s, size
        self._names: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, now: float) -> str | None:
        """The cached name for a token hash, or None when unknown or expired."""
        with self._lock:
            hit = self._names.get(key)
            if hit is None or now - hit[1] >= self.ttl_s:
                self._names.pop(key, None)
                return None
            self._names.move_to_end(key)
            return hit[0]

    def put(self, key: str, name: str, now: float) -> None:
        """Remember a token hash's name, forgetting the least recently used beyond `size`."""
        with self._lock:
            self._names[key] = (name, now)
            self._names.move_to_end(key)
            while len(self._names) > self.size:
                self._names.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._names)


WHOAMI = WhoamiCache()


def whoami_name(token: str) -> str:
    """The username a token belongs to, as the Hub says (cached by the token's hash for a few minutes)."""
    key = hashlib.sha256(token.encode()).hexdigest()
    now = time.monotonic()
    known = WHOAMI.get(key, now)
    if known is not None:
        return known
    try:
        info = hub_client.make_api(token).whoami()
    except Exception as exc:  # any failure means: this token does not identify anyone
        raise NotAllowed(hub_client.describe_error(exc, "check who you are")) from None
    if info.get("type", "user") != "user" or not info.get("name"):
        raise NotAllowed("This token does not belong to a personal Hugging Face account; sign in as a user.")
    WHOAMI.put(key, str(info["name"]), now)
    return str(info["name"])


def _saved_token() -> str | None:
    from huggingface_hub import get_token

    return get_token()


def current_user(profile: Any = None, oauth_token: Any = None, settings: Settings | None = None) -> User:
    """The request's user from gradio's `OAuthProfile` / `OAuthToken` (either may be None).

    On a Space: the signed-in profile; else a token passed by an API client, checked with the Hub; else anonymous.
    Locally: the saved login's token (gradio's mocked sign-in gives a placeholder token, which is never used).
    """
    settings = settings or Settings.from_env()
    token = _token_text(oauth_token)
    if token == MOCK_OAUTH_TOKEN:
        token = None
    name = _profile_name(profile)
    if settings.on_space:
        if name:
            return User(name, token, True, "session")
        if token:
            return User(whoami_name(token), token, True, "token")
        return ANONYMOUS
    return User(name, token or _saved_token(), bool(name), "session" if name else "local")


# --- what they may see ---------------------------------------------------------------------------------------------
def can_see(run: Run, user: User, settings: Settings | None = None) -> bool:
    """Locally every run; on a Space only the user's own."""
    settings = settings or Settings.from_env()
    return not settings.on_space or (user.username is not None and run.owner == user.username)


def visible_runs(
    store: Store, user: User, status: str | list[str] | None = None, settings: Settings | None = None
) -> list[Run]:
    """The runs this user may see, newest first (none for an anonymous visitor of a Space)."""
    settings = settings or Settings.from_env()
    if not settings.on_space:
        return store.list_runs(status=status)
    if user.username is None:
        return []
    return store.list_runs(status=status, owner=user.username)


def _denied(ref: str, user: User) -> AccessDenied:
    who = f"signed in as {user.username}" if user.username else "not signed in"
    return AccessDenied(
        f"No run {ref!r} among your runs ({who}): on this Space you can only see and control the "
        f"runs you launched yourself."
    )


def authorize(run: Run, user: User, settings: Settings | None = None) -> Run:
    """The run if the user may see it; AccessDenied otherwise."""
    if not can_see(run, user, settings):
        raise _denied(run.id, user)
    return run


def get_run(store: Store, run_id: str, user: User, settings: Settings | None = None) -> Run:
    """One of the user's runs by exact id (AccessDenied for another user's run, alike to a missing one)."""
    settings = settings or Settings.from_env()
    try:
        run = store.get_run(run_id)
    except RunNotFound:
        if settings.on_space:
            raise _denied(run_id, user) from None
        raise
    return authorize(run, user, settings)


def find_run(store: Store, ref: str, user: User, settings: Settings | None = None) -> Run:
    """A run by id, unique id prefix or name, looked up among the user's runs only."""
    settings = settings or Settings.from_env()
    if not settings.on_space:
        return store.find_run(ref)
    mine = visible_runs(store, user, settings=settings)
    exact = [r for r in mine if r.id == ref]
    prefixed = [r for r in mine if r.id.startswith(ref)] if ref else []
    named = [r for r in mine if r.name == ref]
    if exact:
        return exact[0]
    if named:
        return named[0]  # newest first: a name means its newest run
    if len(prefixed) > 1:
        raise RunNotFound(f"{ref!r} matches {len(prefixed)} of your runs; give more of the id.")
    if prefixed:
        return prefixed[0]
    raise _denied(ref, user)


# --- what they may launch ------------------------------------------------------------------------------------------
def _resolve(base: Path, value: str) -> Path:
    p = Path(value).expanduser()
    return (p if p.is_absolute() else base / p).resolve()


def _inside_examples(path: Path) -> bool:
    return EXAMPLES_DIR.resolve() in path.parents


def local_paths(spec: RunSpec) -> list[tuple[str, str]]:
    """(field, value) of every spec value that names a file on the dashboard's machine."""
    out: list[tuple[str, str]] = []
    d = spec.dataset
    for key, value in (("dataset.data_files", d.data_files), ("dataset.eval_data_files", d.eval_data_files)):
        for item in [value] if isinstance(value, str) else (value or []):
            out.append((key, str(item)))
    for i, r in enumerate(spec.rewards):
        if r.function and ":" in r.function and r.function.rsplit(":", 1)[0].endswith(".py"):
            out.append((f"rewards[{i}].function", r.function.rsplit(":", 1)[0]))
    if spec.backend.accelerate_config and spec.backend.accelerate_config not in ACCELERATE_CONFIGS:
        out.append(("backend.accelerate_config", spec.backend.accelerate_config))
    if spec.agent is not None:
        out += [(where, t.rsplit(":", 1)[0]) for where, t in spec.agent.code_targets() if is_file_target(t)]
    return out


def spec_policy_errors(
    spec: RunSpec, base_dir: str | Path | None = None, settings: Settings | None = None, for_launch: bool = True
) -> list[FieldError]:
    """What this Space does not allow in a spec (nothing locally). Checked before validation reads any file.

    `for_launch=False` (pre-flight checks that start nothing): only the rules on code and files.
    """
    settings = settings or Settings.from_env()
    if not settings.on_space:
        return []
    base = Path(base_dir) if base_dir else EXAMPLES_DIR.parent
    errors: list[FieldError] = []
    kind = spec.backend.kind
    policy = space_policy(kind)
    if for_launch and policy.on_dashboard_host and not settings.allow_local_backend:
        allowed = " or ".join(repr(k) for k in space_kinds())
        errors.append(
            FieldError(
                "backend.kind",
                kind,
                "is disabled on this Space: runs go to Hugging Face Jobs on "
                f"your own account. Set backend.kind to {allowed} (the Space owner can enable the "
                "local backend with GRPO_DASHBOARD_ALLOW_LOCAL_BACKEND=1).",
            )
        )
    if not settings.allow_custom_code:
        for i, r in enumerate(spec.rewards):
            key = r.builtin or r.name
            if r.function or key == "python":
                part = "function" if r.function else "builtin" if r.builtin else "name"
                where = f"rewards[{i}].{part}"
                errors.append(
                    FieldError(
                        where,
                        r.function or key,
                        "runs your own Python code, which is disabled on "
                        "this Space; use a built-in reward, or run the dashboard on your machine "
                        "(the Space owner can enable it with GRPO_DASHBOARD_ALLOW_CUSTOM_CODE=1).",
                    )
                )
        if spec.agent is not None:  # custom tools, environments, rollout functions (built-ins are ours)
            builtin = set(jobfiles.agents_module().BUILTIN_TOOLS) | set(jobfiles.agents_module().BUILTIN_ENVIRONMENTS)
            errors += [
                FieldError(
                    where,
                    target,
                    "runs your own Python code, which is disabled on this Space; use "
                    "the built-in tools and environments, or run the dashboard on your machine.",
                )
                for where, target in spec.agent.code_targets()
                if target not in builtin
            ]
    for key, value in local_paths(spec):
        if not _inside_examples(_resolve(base, value)):
            errors.append(
                FieldError(
                    key,
                    value,
                    "is a file on the Space's disk; only the dashboard's own examples/ "
                    "files may be used here. Use a Hub dataset (dataset.path) instead.",
                )
            )
    errors += _model_path_errors(spec, base)
    errors += _dataset_path_errors(spec, base)
    if spec.health.webhook_url and policy.on_dashboard_host:
        allowed = " or ".join(repr(k) for k in space_kinds())
        errors.append(
            FieldError(
                "health.webhook_url",
                "(set)",
                "would be posted from the Space's own machine by a "
                "local job; on this Space alerts are posted only by jobs running on Hugging Face "
                f"Jobs. Remove health.webhook_url, or use backend.kind {allowed}.",
            )
        )
    if for_launch and spec.output_dir:
        errors.append(
            FieldError(
                "output_dir",
                spec.output_dir,
                "cannot be chosen on this Space: the model is "
                "written to the run's own bucket folder. Remove output_dir.",
            )
        )
    return errors


def _model_path_errors(spec: RunSpec, base: Path) -> list[FieldError]:
    """The model may name a Hub id, a directory in examples/, or (build_tiny) a fresh relative path under .cache/."""
    model = spec.model.name_or_path
    if not model:
        return []
    where = _resolve(base, model)
    if spec.model.build_tiny:
        raw = Path(model)
        tiny_root = (PROJECT_ROOT / ".cache").resolve()
        if raw.is_absolute() or model.startswith("~") or ".." in raw.parts or tiny_root not in where.parents:
            return [
                FieldError(
                    "model.name_or_path",
                    model,
                    "with build_tiny names where the tiny test model is "
                    "built; on this Space it must be a relative path under .cache/, such as "
                    "'.cache/tiny-qwen2-char'.",
                )
            ]
        return []
    if where.exists() and not _inside_examples(where):
        return [
            FieldError(
                "model.name_or_path",
                model,
                "is a path on the Space's disk; give a Hub model id such as 'Qwen/Qwen2.5-0.5B-Instruct'.",
            )
        ]
    return []


def _dataset_path_errors(spec: RunSpec, base: Path) -> list[FieldError]:
    """On a Space `dataset.path` is a Hub id by pattern, never a name that could be looked up on the Space's disk."""
    path = spec.dataset.path
    if not path:
        return []
    if not HUB_DATASET_ID.match(path) or ".." in path or Path(path).exists() or (base / path).exists():
        return [
            FieldError(
                "dataset.path",
                path,
                "must be a Hub dataset id 'owner/name' (letters, digits, '-', '_', "
                "'.'), such as 'openai/gsm8k'; paths and names on the Space's disk cannot be read here.",
            )
        ]
    return []


def hub_token(user: User, settings: Settings | None = None) -> str | bool | None:
    """The token for Hub reads made for this user: theirs or none on a Space (never the Space owner's); locally the
    saved login (None lets huggingface_hub find it)."""
    settings = settings or Settings.from_env()
    if not settings.on_space:
        return user.token
    return user.token or False


def custom_code_refusal(settings: Settings | None = None) -> str | None:
    """Why custom code may not run here, or None: on a Space it needs a real sandbox boundary (bubblewrap, or
    Landlock where user namespaces are refused)."""
    settings = settings or Settings.from_env()
    if not settings.on_space or sandbox.boundary() is not None:
        return None
    why = sandbox.no_boundary_reason() or (
        "neither bubblewrap with user namespaces nor Landlock is available or permitted"
    )
    return (
        f"custom code cannot run on this Space: no sandbox boundary can be created on its machine ({why}), and "
        f"code is never run without one here."
    )


def check_may_run_rewards(
    spec: RunSpec, user: User, base_dir: str | Path | None = None, settings: Settings | None = None
) -> None:
    """NotAllowed when the reward contract check (reward code run on this machine, sandboxed) may not run here.

    On a Space: signed-in users only, the spec's code and file rules hold, and `code_tests` (which executes program
    text from the data and completions) counts as custom code.
    """
    settings = settings or Settings.from_env()
    if not settings.on_space:
        return
    if not user.signed_in:
        raise NotAllowed(
            "Sign in with Hugging Face to run the reward check on this Space (it runs the rewards on "
            "the Space's machine); or run `python -m grpo_dashboard check-rewards SPEC` locally."
        )
    problems = spec_policy_errors(spec, base_dir, settings, for_launch=False)
    refusal = custom_code_refusal(settings)
    if refusal:
        problems += [
            FieldError(f"rewards[{i}]", r.function or r.builtin or r.name, refusal)
            for i, r in enumerate(spec.rewards)
            if r.function or (r.builtin or r.name) in ("python", "code_tests")
        ]
    if not settings.allow_custom_code:
        problems += [
            FieldError(
                f"rewards[{i}]",
                r.builtin or r.name,
                "runs program text from the data on this "
                "machine; the reward check cannot run it on this Space (run it locally).",
            )
            for i, r in enumerate(spec.rewards)
            if (r.builtin or r.name) == "code_tests"
        ]
    if problems:
        raise NotAllowed("Not on this Space: " + " ".join(str(e) for e in problems))


def with_user_defaults(spec: RunSpec, user: User, settings: Settings | None = None) -> RunSpec:
    """A copy of the spec whose Jobs namespace defaults to the user's own username (on a Space)."""
    settings = settings or Settings.from_env()
    if (
        settings.on_space
        and user.username
        and space_policy(spec.backend.kind).namespace_is_user
        and not spec.backend.namespace
    ):
        return replace(spec, backend=replace(spec.backend, namespace=user.username))
    return spec


class LaunchLimiter:
    """Launches per user in a sliding window (in memory: a restart forgets, which only errs on the lenient side)."""

    def __init__(self) -> None:
        self._times: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def acquire(self, key: str, limit: int | None, window_s: float, now: float | None = None) -> None:
        """Count one launch for `key`; NotAllowed with the wait when `limit` launches happened within the window."""
        if not limit:
            return
        now = time.monotonic() if now is None else now
        with self._lock:
            times = self._times.setdefault(key, deque())
            while times and now - times[0] >= window_s:
                times.popleft()
            if len(times) >= limit:
                wait = max(1, math.ceil(times[0] + window_s - now))
                raise NotAllowed(
                    f"Too many launches: at most {limit} per {window_s:g} s per user on this Space. "
                    f"Try again in {wait} s."
                )
            times.append(now)

    def reset(self) -> None:
        """Forget every count (tests)."""
        with self._lock:
            self._times.clear()


LIMITER = LaunchLimiter()
_user_locks: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
_user_locks_guard = threading.Lock()


def _user_lock(key: str) -> Any:
    """The lock serialising one user's launches; it lives while a launch holds it (weakly kept: no growth)."""
    with _user_locks_guard:
        lock = _user_locks.get(key)
        if lock is None:
            lock = _user_locks[key] = threading.RLock()
        return lock


def check_user_may_launch(store: Store, user: User, settings: Settings | None = None) -> None:
    """NotAllowed when this user may not launch now: anonymous on a Space, or at the active-run cap."""
    settings = settings or Settings.from_env()
    if not settings.on_space:
        return
    if not user.signed_in or not user.username:
        raise NotAllowed(SIGN_IN)
    if settings.max_active_runs:
        active = visible_runs(store, user, status=list(ACTIVE), settings=settings)
        if len(active) >= settings.max_active_runs:
            names = ", ".join(r.id for r in active[:5])
            raise NotAllowed(
                f"You already have {len(active)} queued or running runs ({names}); this Space allows "
                f"{settings.max_active_runs} at a time per user. Wait for one to end or cancel one, "
                f"then launch again."
            )


def launch(
    spec: RunSpec,
    store: Store,
    user: User,
    base_dir: str | Path | None = None,
    settings: Settings | None = None,
    backends: Backends | None = None,
) -> Run:
    """Launch on the user's behalf: sign-in, spec policy, cap and rate checks, then `runs.launch` with their token
    on `backends` (the app's; default: the process's).

    Raises NotAllowed (the user may not launch now), SpecError (the spec breaks this Space's rules or is invalid).
    """
    settings = settings or Settings.from_env()
    check_user_may_launch(store, user, settings)
    spec = with_user_defaults(spec, user, settings)
    problems = spec_policy_errors(spec, base_dir, settings)
    if problems:
        raise SpecError(problems)
    if not settings.on_space:
        return runs.launch(spec, store, base_dir=base_dir, owner=user.username, token=user.token, backends=backends)
    with _user_lock(str(user.username)):
        check_user_may_launch(store, user, settings)  # again, now that this user's other launches are done
        LIMITER.acquire(str(user.username), settings.launch_limit, settings.launch_window_s)
        try:
            return runs.launch(
                spec, store, base_dir=base_dir, owner=user.username, token=user.token, backends=backends
            )
        except BackendError as exc:
            raise BackendError(redact(str(exc), user.token)) from None


def resume(
    store: Store,
    run_id: str,
    user: User,
    checkpoint: int | str | None = None,
    settings: Settings | None = None,
    backends: Backends | None = None,
    max_steps: int | None = None,
) -> Run:
    """Resume one of the user's runs (launch/resume.py) under the same rules as a launch: sign-in, the active-run
    cap and the launch rate, one launch of a user at a time. `max_steps`: a new end (a run that reached its end needs
    one). Raises NotAllowed, RunNotFound or BackendError."""
    from grpo_dashboard.launch.resume import resume_run

    settings = settings or Settings.from_env()
    run = get_run(store, run_id, user, settings)
    check_user_may_launch(store, user, settings)
    if not settings.on_space:
        return resume_run(store, run, checkpoint, token=user.token, backends=backends, max_steps=max_steps)
    with _user_lock(str(user.username)):
        check_user_may_launch(store, user, settings)
        LIMITER.acquire(str(user.username), settings.launch_limit, settings.launch_window_s)
        try:
            return resume_run(
                store,
                get_run(store, run_id, user, settings),
                checkpoint,
                token=user.token,
                backends=backends,
                max_steps=max_steps,
            )
        except BackendError as exc:
            raise BackendError(redact(str(exc), user.token)) from None


def cancel(
    store: Store, run_id: str, user: User, settings: Settings | None = None, backends: Backends | None = None
) -> Run:
    """Cancel one of the user's runs; a Jobs run is canceled with the user's own token."""
    settings = settings or Settings.from_env()
    run = get_run(store, run_id, user, settings)
    if settings.on_space and not user.signed_in:
        raise NotAllowed(SIGN_IN)
    try:
        return runs.cancel(store, run, token=user.token, backends=backends)
    except BackendError as exc:
        raise BackendError(redact(str(exc), user.token)) from None


def manage(store: Store, run_id: str, user: User, settings: Settings | None = None) -> Run:
    """One of the user's runs that they may rename, annotate or delete (on a Space: signed in, their own)."""
    settings = settings or Settings.from_env()
    run = get_run(store, run_id, user, settings)
    if settings.on_space and not user.signed_in:
        raise NotAllowed(SIGN_IN)
    return run


def resume_following(
    store: Store, user: User, settings: Settings | None = None, backends: Backends | None = None
) -> int:
    """After a restart, follow the user's active Jobs runs again with their token; returns how many were started.

    Cheap and non-blocking (the followers run in background threads), so list polls may call it every time.
    """
    settings = settings or Settings.from_env()
    if not settings.on_space or not user.token or not user.username:
        return 0
    started = 0
    for run in visible_runs(store, user, status=list(ACTIVE), settings=settings):
        started += runs.resume(store, run, user.token, backends)
    return started
