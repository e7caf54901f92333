"""The Space side of the fake Hub: Space repos for `deploy-space`, and "Sign in with Hugging Face" (OpenID Connect).

Repos: `create_repo` (POST /api/repos/create), README validation, `preupload` (every file "regular") and `commit`
(files inline, base64), which is what `upload_folder` sends for small files.

Sign-in: the OpenID provider gradio's real Space routes talk to through authlib (`OPENID_PROVIDER_URL` = the fake's
URL): discovery, /oauth/authorize (redirects back with a code; the test picks who signs in with `?login_as=NAME`,
standing in for the browser's hf.co session), /oauth/token (the user's Hub token as access token, and an HS256-signed
id_token with the OAuthProfile claims) and the JWKS that verifies it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode

KEY_ID = "fake-hub-key"


@dataclass
class OidcState:
    """The provider's signing key and the codes it handed out (code -> (user, nonce, client id))."""

    key: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    codes: dict[str, tuple[str, str | None, str]] = field(default_factory=dict)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _jwt(claims: dict[str, Any], key: bytes) -> str:
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT", "kid": KEY_ID}).encode())
    payload = _b64url(json.dumps(claims).encode())
    signature = hmac.new(key, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{_b64url(signature)}"


def _redirect(handler: Any, location: str) -> None:
    handler.send_response(302)
    handler.send_header("Location", location)
    handler.send_header("Content-Length", "0")
    handler.end_headers()


def oidc_route(
    handler: Any, hub: Any, method: str, parts: list[str], query: dict[str, list[str]], body: bytes
) -> bool:
    """Serve an OpenID Connect route (no Bearer token needed); False when the path is not one."""
    state: OidcState = hub.oidc
    if method == "GET" and parts == [".well-known", "openid-configuration"]:
        handler._json(
            200,
            {
                "issuer": hub.url,
                "authorization_endpoint": f"{hub.url}/oauth/authorize",
                "token_endpoint": f"{hub.url}/oauth/token",
                "userinfo_endpoint": f"{hub.url}/oauth/userinfo",
                "jwks_uri": f"{hub.url}/oauth/jwks",
                "response_types_supported": ["code"],
                "id_token_signing_alg_values_supported": ["HS256"],
                "subject_types_supported": ["public"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            },
        )
        return True
    if method == "GET" and parts == ["oauth", "jwks"]:
        handler._json(
            200, {"keys": [{"kty": "oct", "k": _b64url(state.key), "alg": "HS256", "kid": KEY_ID, "use": "sig"}]}
        )
        return True
    if method == "GET" and parts == ["oauth", "authorize"]:
        one = {k: v[0] for k, v in query.items()}
        user = one.get("login_as")
        if user not in hub.users.values():
            handler._error(400, f"unknown user {user!r}: pass ?login_as=NAME of an added user")
            return True
        code = secrets.token_hex(8)
        state.codes[code] = (user, one.get("nonce"), one["client_id"])
        sep = "&" if "?" in one["redirect_uri"] else "?"
        _redirect(handler, one["redirect_uri"] + sep + urlencode({"code": code, "state": one["state"]}))
        return True
    if method == "POST" and parts == ["oauth", "token"]:
        form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
        found = state.codes.pop(form.get("code", ""), None)
        if found is None:
            handler._json(400, {"error": "invalid_grant"})
            return True
        user, nonce, client_id = found
        token = next(t for t, name in hub.users.items() if name == user)
        now = int(time.time())
        claims = {
            "iss": hub.url,
            "sub": f"u-{user}",
            "aud": client_id,
            "iat": now,
            "exp": now + 3600,
            "name": user.title(),
            "preferred_username": user,
            "profile": f"{hub.url}/{user}",
            "picture": f"{hub.url}/avatars/{user}.png",
        }
        if nonce:
            claims["nonce"] = nonce
        handler._json(
            200,
            {
                "access_token": token,
                "token_type": "bearer",
                "expires_in": 3600,
                "scope": "openid profile jobs",
                "id_token": _jwt(claims, state.key),
            },
        )
        return True
    return False


def repo_route(handler: Any, hub: Any, parts: list[str], body: bytes) -> bool:
    """Serve a POST of the repo API that `deploy-space` uses; False when the path is not one."""
    if parts == ["api", "repos", "create"]:
        payload = json.loads(body)
        repo_id = f"{payload.get('organization') or handler._user()}/{payload['name']}"
        url = f"{hub.url}/{payload.get('type', 'model')}s/{repo_id}"
        if handler._forbidden(repo_id.split("/")[0]):
            return True
        if repo_id in hub.repos:
            handler._json(409, {"error": "You already created this repo", "url": url})
            return True
        hub.repos[repo_id] = {"payload": payload, "files": {}, "commits": 0}
        handler._json(200, {"url": url, "name": repo_id})
        return True
    if parts == ["api", "validate-yaml"]:
        handler._json(200, {"errors": [], "warnings": []})
        return True
    if not (len(parts) >= 6 and parts[0] == "api" and parts[4] in ("preupload", "commit")):
        return False
    repo_id = f"{parts[2]}/{parts[3]}"
    repo = hub.repos.get(repo_id)
    if repo is None:
        handler._error(404, f"Repository {repo_id} not found")
        return True
    if handler._forbidden(parts[2]):
        return True
    if parts[4] == "preupload":
        files = json.loads(body)["files"]
        handler._json(
            200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]}
        )
        return True
    for line in body.decode().splitlines():
        op = json.loads(line)
        if op["key"] == "file":
            repo["files"][op["value"]["path"]] = base64.b64decode(op["value"]["content"])
        elif op["key"] != "header":
            handler._error(400, f"the fake hub only takes small files inline, not {op['key']}")
            return True
    repo["commits"] += 1
    oid = f"{repo['commits']:040x}"
    handler._json(200, {"commitUrl": f"{hub.url}/spaces/{repo_id}/commit/{oid}", "commitOid": oid})
    return True
