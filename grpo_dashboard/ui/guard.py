"""Every public endpoint decides who may call it, how much it may send and how long it may take.

`guarded(ctx, fn, ...)` turns a plain function into a gradio handler that, before calling it, finds the request's user
(refusing anonymous visitors of a Space where sign-in is required), refuses text inputs over a size limit, runs it
under a wall-clock limit in a small pool of worker threads, and on a Space strips the server's absolute paths from
whatever it answers. A handler that ran out of time cannot be killed (Python threads cannot be), so it keeps its
worker until it ends; the pool's size bounds how many such handlers can pile up, and callers beyond it are told the
checks are busy instead of queuing without end.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import gradio as gr

from grpo_dashboard.space import access
from grpo_dashboard.ui.auth import user_of
from grpo_dashboard.ui.context import UiContext

MAX_TEXT_CHARS = 256 * 1024
WORKERS = 4
SIGN_IN_FIRST = ("Sign in with Hugging Face (the button at the top of the page) first: on this Space checks, "
                 "validation and the YAML editor work for signed-in users only.")

_pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="grpo-guarded")
_slots = threading.BoundedSemaphore(WORKERS)


def check_sizes(args: tuple[Any, ...], limit: int = MAX_TEXT_CHARS) -> None:
    """gr.Error when a text input is longer than `limit` characters."""
    for value in args:
        if isinstance(value, str) and len(value) > limit:
            raise gr.Error(f"An input of {len(value):,} characters is over this dashboard's limit of {limit:,}; a run "
                           f"spec is a few kilobytes. Shorten it (large data belongs in a dataset, not the spec).")


def run_limited(call: Callable[[], Any], limit_s: float, what: str) -> Any:
    """`call()` in a worker thread; gr.Error when it takes longer than `limit_s` or every worker is busy."""
    if not _slots.acquire(blocking=False):
        raise gr.Error(f"Too many {what}s are running on this dashboard right now; try again in a minute.")

    def work() -> Any:
        try:
            return call()
        finally:
            _slots.release()

    future = _pool.submit(work)
    try:
        return future.result(timeout=limit_s)
    except FutureTimeout:
        raise gr.Error(f"The {what} took longer than {limit_s:g} s and was given up. Check that the dataset and "
                       f"model ids are right and the Hub is reachable, or run the same check locally with the CLI."
                       ) from None


def _scrubbed(value: Any) -> Any:
    if isinstance(value, str):
        return access.scrub_paths(value)
    if isinstance(value, list):
        return [_scrubbed(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_scrubbed(v) for v in value)
    if isinstance(value, dict):
        return {k: _scrubbed(v) for k, v in value.items()}
    return value


def guarded(ctx: UiContext, fn: Callable[..., Any], *, what: str, sign_in: bool = True,
            limit_s: float | None = None, pass_user: bool = False, scrub: bool = True) -> Callable[..., Any]:
    """A gradio handler around `fn(*inputs)` (or `fn(user, *inputs)` with `pass_user`) with the rules above.

    Args:
        what: how messages name the action ("dataset inspection").
        sign_in: on a Space, refuse visitors who are not signed in.
        limit_s: wall-clock limit (None: the handler runs in gradio's own thread, for cheap handlers).
        scrub: on a Space, replace the server's absolute paths in the answer (off for handlers that echo the
            user's own text, such as the YAML editor).
    """
    def handler(profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None, *args: Any) -> Any:
        user = user_of(ctx, profile, oauth)
        on_space = ctx.settings.on_space
        if on_space and sign_in and not user.signed_in:
            raise gr.Error(SIGN_IN_FIRST)
        check_sizes(args)
        call = functools.partial(fn, user, *args) if pass_user else functools.partial(fn, *args)
        try:
            result = call() if limit_s is None else run_limited(call, limit_s, what)
        except gr.Error as exc:
            if on_space:
                exc.message = access.scrub_paths(access.redact(str(exc.message), user.token))
            raise
        return _scrubbed(result) if on_space and scrub else result

    handler.__name__ = getattr(fn, "__name__", "handler")
    handler.__doc__ = fn.__doc__
    return handler
