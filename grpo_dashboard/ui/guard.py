"""The gate every event handler goes through, with the policy `space/policy.py` declares for it.

`gate(ctx, name, fn)` turns a plain function into the gradio handler registered for endpoint `name`. Before calling
`fn` it finds the request's user (on a Space refusing anonymous visitors where the policy says "signed in", before
any input is parsed), refuses text inputs over the policy's cap, spends one call of the user's rate budget, runs
`fn` in the policy's fair worker pool under its time limit (a caller who would have to wait is told "busy" at once),
and on a Space strips the server's absolute paths and tokens from whatever it answers. `fn` keeps its own
signature: gradio still injects the OAuth profile and token (and event data) `fn` declares, and when `fn` declares
none the gate asks gradio for them itself.

`seal(demo)` runs when the app is built and again when it launches: it refuses an app with any handler that did not
go through `gate`, so a new feature cannot add an ungated endpoint, and takes gradio's own queue out of the way of
pooled endpoints (their pool limits them; gradio's per-event queue would make one user wait behind another's work).
It also gives each gated handler its event's outputs: a handler with several outputs answers with a dict keyed by
component (`{component: value}`; gradio leaves the outputs it omits unchanged), never with a list matched to the
outputs by position, which a reordering would silently mis-wire; the gate refuses a positional answer, or a key that
is not one of the event's outputs, with a TypeError naming the endpoint.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any

import gradio as gr

from grpo_dashboard.space import access
from grpo_dashboard.space.budget import Budgets, Busy, TimedOut
from grpo_dashboard.space.policy import ENDPOINTS, SIGNED_IN, Policy
from grpo_dashboard.ui.auth import user_of
from grpo_dashboard.ui.context import UiContext

MAX_TEXT_CHARS = 256 * 1024
SIGN_IN_FIRST = (
    "Sign in with Hugging Face (the button at the top of the page) first: on this Space {what} is for "
    "signed-in users only, and every run goes to Hugging Face Jobs on your own account."
)
GATE_ATTR = "_grpo_endpoint"
OUTPUTS_ATTR = "_grpo_outputs"  # the ids of the event's output blocks, set by seal()
_PROFILE = "_gate_profile"
_TOKEN = "_gate_oauth"
_budgets: dict[int, Budgets] = {}


def budgets(ctx: UiContext) -> Budgets:
    """The app's pools and rate budgets (one set per UiContext)."""
    found = _budgets.get(id(ctx))
    if found is None:
        found = _budgets[id(ctx)] = Budgets()
    return found


def check_sizes(args: tuple[Any, ...], limit: int = MAX_TEXT_CHARS, what: str = "this action") -> None:
    """gr.Error when a text input (or a text inside a list input) is longer than `limit` characters."""
    for value in args:
        texts = value if isinstance(value, (list, tuple)) else [value]
        for text in texts:
            if isinstance(text, str) and len(text) > limit:
                raise gr.Error(
                    f"An input of {len(text):,} characters is over the limit of {limit:,} for {what}; a "
                    f"run spec is a few kilobytes. Shorten it (large data belongs in a dataset, not the "
                    f"spec)."
                )


def _user_key(user: access.User) -> str:
    if user.username:
        return "user:" + user.username
    from gradio.context import LocalContext

    request = LocalContext.request.get(None)
    headers = getattr(request, "headers", None) or {}
    forwarded = str(headers.get("x-forwarded-for", "")).split(",")[0].strip()
    client = getattr(getattr(request, "client", None), "host", None)
    return "anon:" + (forwarded or str(client or "?"))


def _composed(fn: Callable[..., Any], pass_user: bool) -> tuple[inspect.Signature, dict[str, Any], str, str, int]:
    """The signature gradio sees, its type hints, the names of the profile and token parameters, and how many
    leading parameters are the gate's own (0 when `fn` declares the profile and token itself)."""
    try:
        hints = typing.get_type_hints(fn)
    except (NameError, TypeError):
        hints = {}
    params = list(inspect.signature(fn).parameters.values())
    if pass_user:
        params = params[1:]
    profile = next((p.name for p in params if hints.get(p.name) in (gr.OAuthProfile | None, gr.OAuthProfile)), None)
    token = next((p.name for p in params if hints.get(p.name) in (gr.OAuthToken | None, gr.OAuthToken)), None)
    own = 0
    if profile is None or token is None:
        if profile or token:
            raise TypeError(f"{fn.__name__} declares only one of the OAuth profile and token; declare both or none.")
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        params = [inspect.Parameter(_PROFILE, kind), inspect.Parameter(_TOKEN, kind), *params]
        hints = {**hints, _PROFILE: gr.OAuthProfile | None, _TOKEN: gr.OAuthToken | None}
        profile, token, own = _PROFILE, _TOKEN, 2
    hints.pop("return", None)
    return inspect.Signature(params), hints, profile, token, own


def gate(
    ctx: UiContext,
    name: str,
    fn: Callable[..., Any],
    *,
    what: str | None = None,
    pass_user: bool = False,
    scrub: bool = True,
) -> Callable[..., Any]:
    """The handler for endpoint `name` (a key of policy.ENDPOINTS) around `fn`, with that policy applied.

    Args:
        what: how messages name the action ("dataset inspection"; default: the endpoint's name).
        pass_user: call `fn(user, *inputs)` with the request's access.User.
        scrub: on a Space, replace the server's absolute paths in the answer (off for handlers that echo the
            user's own text, such as the YAML editor).
    """
    if name not in ENDPOINTS:
        raise KeyError(
            f"endpoint {name!r} has no policy: declare it in grpo_dashboard/space/policy.py ENDPOINTS "
            f"(who may call it, its pool, time limit, size cap and rate) before registering it."
        )
    policy: Policy = ENDPOINTS[name]
    label = what or name.replace("_", " ")
    signature, hints, profile_name, token_name, own = _composed(fn, pass_user)
    names = list(signature.parameters)
    at_profile, at_token = names.index(profile_name), names.index(token_name)

    def handler(*args: Any) -> Any:
        profile = args[at_profile] if len(args) > at_profile else None
        oauth = args[at_token] if len(args) > at_token else None
        user = user_of(ctx, profile, oauth)
        on_space = ctx.settings.on_space
        inner = args[own:]
        if on_space and policy.who == SIGNED_IN and not user.signed_in:
            raise gr.Error(SIGN_IN_FIRST.format(what=label))
        check_sizes(inner, policy.max_text, label)
        key = _user_key(user)
        call = functools.partial(fn, user, *inner) if pass_user else functools.partial(fn, *inner)
        try:
            if on_space and policy.rate:
                budgets(ctx).rate(name, *policy.rate).take(key, label)
            if policy.pool is None:
                result = call()
            else:
                result = budgets(ctx).run(policy.pool, key, call, float(policy.limit_s or 60.0), label, fair=on_space)
        except (Busy, TimedOut) as exc:
            hint = (
                (
                    " Check that the dataset and model ids are right and the Hub is reachable, or run the same check "
                    "locally with the CLI."
                )
                if isinstance(exc, TimedOut)
                else ""
            )
            raise gr.Error(str(exc) + hint) from None
        except gr.Error as exc:
            if on_space:
                exc.message = access.scrub_paths(access.redact(str(exc.message), user.token))
            raise
        check_named(name, result, getattr(handler, OUTPUTS_ATTR, None))
        return access.scrubbed(result, user.token) if on_space and scrub else result

    handler.__signature__ = signature  # type: ignore[attr-defined]
    handler.__annotations__ = hints
    handler.__name__ = getattr(fn, "__name__", "handler")
    handler.__doc__ = fn.__doc__
    setattr(handler, GATE_ATTR, name)
    return handler


def check_named(name: str, result: Any, outputs: frozenset[int] | None) -> None:
    """TypeError when the answer of endpoint `name` to an event with several `outputs` (block ids) is positional, or
    keys a component that is not one of them."""
    if outputs is None or len(outputs) < 2:
        return
    if isinstance(result, (list, tuple)):
        raise TypeError(
            f"{name} answered with a {type(result).__name__} of {len(result)} values matched to its "
            f"{len(outputs)} outputs by position; answer with a dict keyed by component "
            f"({{component: value}}) so that no value depends on the order of the outputs."
        )
    if isinstance(result, dict) and result != gr.skip():
        stray = [key for key in result if not isinstance(key, gr.blocks.Block) or key._id not in outputs]
        if stray:
            raise TypeError(
                f"{name} answered for {', '.join(map(repr, stray[:3]))}, not among its outputs; key "
                f"the answer by the event's own output components (or add them to its outputs)."
            )


def ungated(demo: gr.Blocks) -> list[str]:
    """The event handlers of `demo` that did not go through `gate` (or whose gate names another endpoint)."""
    bad = []
    for block_fn in demo.fns.values():
        if block_fn.fn is None:  # a browser-only (js) event: nothing runs on the server
            continue
        endpoint = getattr(block_fn.fn, GATE_ATTR, None)
        visible = getattr(block_fn, "api_visibility", "public") != "private"
        if endpoint is None or (visible and endpoint != block_fn.api_name):
            bad.append(f"{block_fn.api_name} ({getattr(block_fn.fn, '__name__', '?')})")
    return bad


def seal(demo: gr.Blocks, ctx: UiContext) -> None:
    """Gate the handlers gradio registers itself (declared `gradio_own`), refuse an app with any other ungated
    handler, and let each pooled endpoint's pool, not gradio's queue, bound it."""
    for block_fn in demo.fns.values():
        policy = ENDPOINTS.get(str(block_fn.api_name))
        if (
            block_fn.fn is not None
            and policy is not None
            and policy.gradio_own
            and getattr(block_fn.fn, GATE_ATTR, None) is None
        ):
            block_fn.fn = gate(ctx, str(block_fn.api_name), block_fn.fn)
    bad = ungated(demo)
    if bad:
        raise RuntimeError(
            f"event handler(s) without a policy: {', '.join(bad)}. Register each through "
            f"grpo_dashboard.ui.guard.gate with an endpoint declared in space/policy.py."
        )
    for block_fn in demo.fns.values():
        endpoint = getattr(block_fn.fn, GATE_ATTR, None)
        if endpoint is None:
            continue
        setattr(block_fn.fn, OUTPUTS_ATTR, frozenset(block._id for block in block_fn.outputs))
        if ENDPOINTS[endpoint].pool is not None:
            block_fn.concurrency_limit = None
