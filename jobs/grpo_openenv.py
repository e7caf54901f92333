"""OpenEnv environments as GRPOTrainer `environment_factory` entries, through the real `openenv-core` client.

A spec names one as `openenv:<server>` (alone, or as a value of an environment mapping):

- `openenv:http://host:port` (or https): a running OpenEnv server;
- `openenv:package.module:attr`: an installed environment module whose `attr` is an OpenEnv FastAPI app, or a
  zero-argument function returning one; the run starts it on a free local port (`serve`, a child process in the
  job's process group) and stops it when the job ends.

The factory is a class made from the server's `/schema`: its one tool is named after the action class
(`GuessAction` -> `guess`) with the action's fields as typed, documented arguments (TRL builds the tool schema from
them), each instance holds one WebSocket session (`GenericEnvClient(...).sync()`), `reset(**row)` resets it and
returns the observation's text, a tool call steps it, and `get_reward()` is the last observation's reward (TRL's
environment-owned reward, logged under the class name, `OpenEnv<Name>`).

`python grpo_openenv.py probe TARGET` checks a target the way the job uses it (server reachable, schema, tool
signature, one reset and one step) and prints one JSON line; `python grpo_openenv.py serve module:attr PORT` serves
an app. Light at import: openenv, transformers and uvicorn load inside the functions.
"""

from __future__ import annotations

import atexit
import importlib
import inspect
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

PREFIX = "openenv:"
JSON_TYPES: dict[str, type] = {"string": str, "integer": int, "number": float, "boolean": bool}
BASE_FIELDS = {"metadata", "done", "reward"}  # fields every OpenEnv Action / Observation has
START_TIMEOUT_S = 60.0
SAMPLE_ARGS: dict[type, Any] = {str: "7", int: 7, float: 7.0, bool: True}
_servers: dict[str, tuple[str, subprocess.Popen[bytes]]] = {}  # app target -> (url, process), this process's
_sessions: weakref.WeakSet[Any] = weakref.WeakSet()  # live environment instances (closed before a server stops)


def is_target(target: Any) -> bool:
    """True for an `openenv:` environment reference."""
    return isinstance(target, str) and target.startswith(PREFIX)


def split(target: str) -> tuple[str | None, str | None]:
    """(url, app): a running server's URL, or the `module:attr` of an app to start."""
    rest = target[len(PREFIX) :].strip()
    if rest.startswith(("http://", "https://")):
        return rest.rstrip("/"), None
    if re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", rest):
        return None, rest
    raise ValueError(
        f"environment_factory {target!r}: after 'openenv:' give a server URL (openenv:http://host:port) or an "
        "installed environment module's app (openenv:package.module:app)."
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read().decode("utf-8"))


def start_server(app: str, log: Callable[[str], None] = print) -> str:
    """Serve `module:attr` on a free local port (once per process); its URL once /health answers."""
    if app in _servers:
        return _servers[app][0]
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [str(Path(__file__).parent), *sys.path] if p)}
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "serve", app, str(port)], env=env)
    url = f"http://127.0.0.1:{port}"
    _servers[app] = (url, proc)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            _servers.pop(app, None)
            raise RuntimeError(f"the OpenEnv server {app!r} exited with status {proc.returncode} before serving")
        try:
            _get(f"{url}/health", timeout=1.0)
            break
        except OSError:
            if time.monotonic() > deadline:
                stop_servers(log)
                raise RuntimeError(f"the OpenEnv server {app!r} did not answer {url}/health in time") from None
            time.sleep(0.2)
    log(f"openenv: serving {app} at {url} (pid {proc.pid})")
    return url


def stop_servers(log: Callable[[str], None] = print) -> None:
    """Close every open session, then stop every server this process started."""
    for env in list(_sessions):
        env._close()
    while _servers:
        app, (url, proc) = _servers.popitem()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log(f"openenv: stopped {app} at {url} (pid {proc.pid})")


atexit.register(stop_servers, lambda _: None)


def _snake(name: str) -> str:
    name = re.sub(r"Action$", "", name) or "step"
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _text(observation: Any) -> str:
    """What the model reads of an observation: its one own text field, else its own fields as JSON."""
    if not isinstance(observation, dict):
        return str(observation)
    own = {k: v for k, v in observation.items() if k not in BASE_FIELDS}
    if len(own) == 1 and isinstance(next(iter(own.values())), str):
        return str(next(iter(own.values())))
    return json.dumps(own, default=str)


def tool_spec(schema: dict[str, Any]) -> tuple[str, list[tuple[str, type, str]], str, list[str]]:
    """(tool name, [(argument, type, description)], docstring summary, problems) from an /schema answer."""
    action = schema.get("action") or {}
    problems = []
    args = []
    required = set(action.get("required") or [])
    for name, prop in (action.get("properties") or {}).items():
        if name in BASE_FIELDS:
            continue
        kind = JSON_TYPES.get(str(prop.get("type")))
        if kind is None:
            problems.append(
                f"action field {name!r} has JSON type {prop.get('type', prop.get('anyOf', '?'))!r}; a tool argument "
                f"must be one of {sorted(JSON_TYPES)}"
            )
            continue
        if name not in required and "default" not in prop:
            problems.append(f"action field {name!r} is optional without a default")
        args.append((name, kind, str(prop.get("description") or name.replace("_", " "))))
    if not args and not problems:
        problems.append("the action has no fields of its own, so the model would have nothing to send")
    summary = str(action.get("description") or f"Take one step in the environment ({action.get('title', '?')}).")
    return _snake(str(action.get("title") or "step")), args, summary.strip().splitlines()[0], problems


def make_factory(url: str, schema: dict[str, Any], name: str = "") -> type:
    """The environment class TRL instantiates (one WebSocket session per instance) for the server at `url`."""
    tool_name, args, summary, problems = tool_spec(schema)
    if problems:
        raise ValueError(f"OpenEnv server {url}: " + "; ".join(problems) + ".")

    def reset(self: Any, **kwargs: Any) -> str | None:
        from openenv.core import GenericEnvClient

        if self._client is None:
            self._client = GenericEnvClient(base_url=url).sync()
            self._client.connect()
        fields = {k: v for k, v in kwargs.items() if isinstance(v, (str, int, float, bool)) and k != "prompt"}
        result = self._client.reset(**fields)
        self._reward = float(result.reward or 0.0)
        text = _text(result.observation)
        return text if text not in ("", "{}") else None

    names = [a for a, _, _ in args]

    def tool(self: Any, *values: Any, **kwargs: Any) -> str:
        result = self._client.step({**dict(zip(names, values, strict=False)), **kwargs})
        self._reward = float(result.reward or 0.0)
        return _text(result.observation)

    def get_reward(self: Any) -> float:
        return float(self._reward)

    def __init__(self: Any) -> None:
        self._client, self._reward = None, 0.0
        _sessions.add(self)

    def close(self: Any) -> None:
        client, self._client = getattr(self, "_client", None), None
        if client is not None:
            try:
                client.close()
            except Exception:  # the server may be gone already
                pass

    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [inspect.Parameter(a, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=t) for a, t, _ in args]
    tool.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    tool.__annotations__ = {**{a: t for a, t, _ in args}, "return": str}
    tool.__doc__ = (
        f"{summary}\n\nArgs:\n"
        + "".join(f"    {a}: {d}\n" for a, _, d in args)
        + "\nReturns:\n    The environment's observation."
    )
    tool.__name__ = tool.__qualname__ = tool_name
    title = re.sub(r"\W", "", str((schema.get("action") or {}).get("title") or "Env").removesuffix("Action"))
    cls_name = "OpenEnv" + (name.title().replace("_", "") if name else title)
    cls = type(
        cls_name,
        (),
        {
            "__init__": __init__,
            "_close": close,
            "__doc__": f"The OpenEnv environment at {url} (tool `{tool_name}`).",
            "reset": reset,
            tool_name: tool,
            "get_reward": get_reward,
        },
    )
    return cls


def factory(target: str, name: str = "", log: Callable[[str], None] = print) -> type:
    """The environment class for an `openenv:` target (its server started first when the run owns it)."""
    url, app = split(target)
    if app is not None:
        url = start_server(app, log)
    assert url is not None
    return make_factory(url, _get(f"{url}/schema", timeout=10.0), name)


def probe(target: str) -> dict[str, Any]:
    """What validation needs: {"problems": [...], "tool": name, "arguments": {...}, "url": ..., "started": bool}."""
    out: dict[str, Any] = {"problems": [], "started": False}
    try:
        url, app = split(target)
        if app is not None:
            url = start_server(app, lambda _: None)
            out["started"] = True
        assert url is not None
        out["url"] = url
        try:
            _get(f"{url}/health")
            schema = _get(f"{url}/schema")
        except OSError as exc:
            out["problems"].append(f"the server at {url} does not answer /health and /schema ({exc})")
            return out
        name, args, _, problems = tool_spec(schema)
        out["problems"] += problems
        out["tool"], out["arguments"] = name, {a: t.__name__ for a, t, _ in args}
        if problems:
            return out
        cls = make_factory(url, schema)
        from transformers.utils import get_json_schema

        env = cls()
        get_json_schema(getattr(env, name))
        env.reset()
        answer = getattr(env, name)(**{a: SAMPLE_ARGS[t] for a, t, _ in args})
        if not isinstance(answer, str):
            out["problems"].append(f"a step answered {type(answer).__name__}, not an observation")
        env.get_reward()
    except Exception as exc:
        out["problems"].append(f"{type(exc).__name__}: {str(exc)[:300]}")
    finally:
        stop_servers(lambda _: None)
    return out


def serve(app: str, port: int) -> None:
    """Serve `module:attr` (an app, or a function returning one) on 127.0.0.1:`port` with uvicorn."""
    import uvicorn

    module, attr = app.split(":")
    obj = getattr(importlib.import_module(module), attr)
    asgi = obj if hasattr(obj, "router") or not callable(obj) else obj()
    uvicorn.run(asgi, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1:2] == ["probe"]:
        print("@@OPENENV_PROBE@@ " + json.dumps(probe(sys.argv[2])), flush=True)
    else:
        sys.exit(f"usage: {sys.argv[0]} serve module:attr PORT | probe TARGET")
