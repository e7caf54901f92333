"""The UI edge of access.py: the request's user from gradio's OAuth parameters, and the sign-in header.

Handlers declare `profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None` as their first parameters; gradio
fills them from the session (they are not inputs and not part of the client API, except that an API client may pass
`oauth_token=`, which access.py checks with the Hub before trusting).
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from grpo_dashboard.space import access
from grpo_dashboard.ui.context import UiContext


def user_of(ctx: UiContext, profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None) -> access.User:
    """The request's user; a token the Hub rejects becomes a gr.Error (with nothing secret in it)."""
    try:
        return access.current_user(profile, oauth, ctx.settings)
    except access.NotAllowed as exc:
        raise gr.Error(str(exc)) from None


def header(ctx: UiContext) -> Any:
    """The sign-in button (on a Space only: locally gradio would need a saved login to mock it) and the mode line."""
    with gr.Row():
        if ctx.settings.on_space:
            gr.LoginButton(elem_id="login-btn", scale=0, min_width=260)
        who = gr.Markdown(ctx.settings.describe(), elem_id="who")
    return who


def who_text(ctx: UiContext, profile: gr.OAuthProfile | None, oauth: gr.OAuthToken | None) -> str:
    """The mode line with the signed-in user."""
    user = user_of(ctx, profile, oauth)
    return f"{ctx.settings.describe()} · {user.label()}" if ctx.settings.on_space else ctx.settings.describe()
