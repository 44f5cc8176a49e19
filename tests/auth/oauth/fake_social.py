"""Local fakes of the social presets' providers, each speaking that provider's wire format.

- FakeGitHub: `/login/oauth/authorize`, `/login/oauth/access_token` (form body with the client
  secret; refusals are 200 answers with an `error` member, as GitHub's are), the REST API's
  `/api/user` and `/api/user/emails` (Bearer, a User-Agent required).
- FakeMicrosoft: the identity platform v2.0 for the `common` tenant: discovery under
  `/common/v2.0/`, whose `issuer` is the `{tenantid}` template, ID tokens with `tid` and the
  tenant's issuer, `email` without `email_verified`, `xms_edov` when asked.
- FakeApple: `response_mode=form_post` only (the authorize page answers an auto-submitting
  HTML form, as appleid.apple.com does), `client_secret_post` whose secret must be an ES256
  JWT from the team's key, `email_verified` as the string "true", the user's name only in
  the first form's `user` field.
- Google and GitLab are plain OpenID providers: FakeIdP (fake_idp.py) as it is.
"""

from __future__ import annotations

import hashlib
import html
import re
import secrets
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlencode

import jwt
import orjson
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.auth.oauth.fake_idp import FakeIdP, IssuedCode, b64url

MICROSOFT_TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
CONSUMERS_TENANT = "9188040d-6c67-4c5b-b112-36a304b66dad"


# --- GitHub -------------------------------------------------------------------------------


@dataclass
class GitHubUser:
    id: int = 583231
    login: str = "octocat"
    name: str | None = "Mona Lisa"
    emails: list[dict[str, Any]] = field(
        default_factory=lambda: [
            {
                "email": "mona@example.org",
                "primary": True,
                "verified": True,
                "visibility": "public",
            },
            {"email": "other@example.org", "primary": False, "verified": True, "visibility": None},
        ]
    )


@dataclass
class _GitHubCode:
    redirect_uri: str
    challenge: str
    user: GitHubUser
    used: bool = False


@dataclass
class FakeGitHub:
    client_id: str
    client_secret: str
    redirect_uri: str
    base: str = ""  # set once the server listens
    user: GitHubUser = field(default_factory=GitHubUser)
    codes: dict[str, _GitHubCode] = field(default_factory=dict)
    tokens: dict[str, GitHubUser] = field(default_factory=dict)
    authorize_seen: list[dict[str, str]] = field(default_factory=list)
    token_forms: list[dict[str, str]] = field(default_factory=list)
    api_seen: list[dict[str, str]] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/login/oauth/authorize", self.authorize)
        app.router.add_post("/login/oauth/access_token", self.access_token)
        app.router.add_get("/api/user", self.api_user)
        app.router.add_get("/api/user/emails", self.api_emails)
        return app

    async def authorize(self, request: web.Request) -> web.Response:
        q = request.query
        self.authorize_seen.append(dict(q))
        if q.get("client_id") != self.client_id or q.get("redirect_uri") != self.redirect_uri:
            return web.Response(status=404, text="The redirect_uri is not associated")
        code = secrets.token_hex(10)  # GitHub's codes are 20 hex characters
        self.codes[code] = _GitHubCode(
            redirect_uri=q["redirect_uri"],
            challenge=q.get("code_challenge", ""),
            user=GitHubUser(**vars(self.user)),
        )
        raise web.HTTPFound(f"{q['redirect_uri']}?{urlencode({'code': code, 'state': q['state']})}")

    @staticmethod
    def _error(error: str) -> web.Response:
        # GitHub answers a refused exchange with 200 and these three members.
        return web.json_response(
            {
                "error": error,
                "error_description": "The code passed is incorrect or expired.",
                "error_uri": "https://docs.github.com/apps/troubleshooting",
            }
        )

    async def access_token(self, request: web.Request) -> web.Response:
        form = {k: str(v) for k, v in (await request.post()).items()}
        self.token_forms.append(form)
        if request.headers.get("Accept") != "application/json":
            return web.Response(text="access_token=x&scope=&token_type=bearer")  # form answer
        if form.get("client_id") != self.client_id or form.get("client_secret") != (
            self.client_secret
        ):
            return self._error("incorrect_client_credentials")
        code = self.codes.get(form.get("code", ""))
        if code is None or code.used or form.get("redirect_uri") != code.redirect_uri:
            return self._error("bad_verification_code")
        code.used = True
        verifier = form.get("code_verifier", "")
        if code.challenge and b64url(hashlib.sha256(verifier.encode()).digest()) != (
            code.challenge
        ):
            return self._error("bad_verification_code")
        token = "gho_" + secrets.token_hex(18)
        self.tokens[token] = code.user
        return web.json_response(
            {"access_token": token, "token_type": "bearer", "scope": "read:user,user:email"}
        )

    def _caller(self, request: web.Request) -> GitHubUser | None:
        self.api_seen.append(dict(request.headers))
        if not request.headers.get("User-Agent"):
            raise web.HTTPForbidden(text="Request forbidden by administrative rules.")
        auth = request.headers.get("Authorization", "")
        return self.tokens.get(auth.removeprefix("Bearer ")) if auth.startswith("Bearer ") else None

    async def api_user(self, request: web.Request) -> web.Response:
        user = self._caller(request)
        if user is None:
            return web.json_response({"message": "Requires authentication"}, status=401)
        public = next((e["email"] for e in user.emails if e.get("visibility") == "public"), None)
        return web.json_response(
            {
                "login": user.login,
                "id": user.id,
                "node_id": "MDQ6VXNlcjE=",
                "type": "User",
                "name": user.name,
                "email": public,
            }
        )

    async def api_emails(self, request: web.Request) -> web.Response:
        user = self._caller(request)
        if user is None:
            return web.json_response({"message": "Requires authentication"}, status=401)
        return web.json_response(user.emails)


# --- Microsoft ----------------------------------------------------------------------------


@dataclass
class FakeMicrosoft(FakeIdP):
    """`issuer` is the server's base URL; the configured issuer is `{issuer}/common/v2.0`."""

    tid: str = MICROSOFT_TENANT
    edov: bool | None = None  # xms_edov claim; None: left out

    def tenant_issuer(self, tid: str) -> str:
        return f"{self.issuer}/{tid}/v2.0"

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/common/v2.0/.well-known/openid-configuration", self.discovery)
        app.router.add_get("/common/oauth2/v2.0/authorize", self.authorize)
        app.router.add_post("/common/oauth2/v2.0/token", self.token)
        app.router.add_get("/common/discovery/v2.0/keys", self.jwks)
        return app

    async def discovery(self, request: web.Request) -> web.Response:
        self.hits["discovery"] += 1
        return web.json_response(
            {
                "token_endpoint": f"{self.issuer}/common/oauth2/v2.0/token",
                "token_endpoint_auth_methods_supported": [
                    "client_secret_post",
                    "private_key_jwt",
                    "client_secret_basic",
                ],
                "jwks_uri": f"{self.issuer}/common/discovery/v2.0/keys",
                "response_modes_supported": ["query", "fragment", "form_post"],
                "subject_types_supported": ["pairwise"],
                "id_token_signing_alg_values_supported": ["RS256"],
                "response_types_supported": ["code", "id_token", "code id_token"],
                "scopes_supported": ["openid", "profile", "email", "offline_access"],
                "issuer": f"{self.issuer}/{{tenantid}}/v2.0",
                "request_uri_parameter_supported": False,
                "authorization_endpoint": f"{self.issuer}/common/oauth2/v2.0/authorize",
                "http_logout_supported": True,
                "claims_supported": ["sub", "iss", "aud", "exp", "iat", "tid", "email", "name"],
                "tenant_region_scope": None,
                "cloud_instance_name": "microsoftonline.com",
            }
        )

    def id_token_claims(self, code: IssuedCode) -> dict[str, Any]:
        claims = super().id_token_claims(code)
        claims["iss"] = self.tenant_issuer(self.tid)
        claims["tid"] = self.tid
        claims["oid"] = "00000000-0000-0000-66f3-3332eca7ea81"
        claims["ver"] = "2.0"
        claims.pop("email_verified", None)  # Microsoft never sends it
        if self.edov is not None:
            claims["xms_edov"] = self.edov
        for name, value in self.claim_overrides.items():
            if value is None:
                claims.pop(name, None)
            else:
                claims[name] = value
        return claims


# --- Apple --------------------------------------------------------------------------------


def apple_key() -> tuple[ec.EllipticCurvePrivateKey, str]:
    """A team's Sign in with Apple key and its .p8 text (PKCS#8 PEM)."""
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    return key, pem


@dataclass
class FakeApple(FakeIdP):
    team_id: str = "TEAM123456"
    key_id: str = "KEY1234567"
    team_key: Any = None  # the private key whose public half Apple holds
    user_sent: set[str] = field(default_factory=set)  # subs whose name was sent once
    secrets_seen: list[dict[str, Any]] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", self.discovery)
        app.router.add_get("/auth/authorize", self.authorize_form_post)
        app.router.add_post("/auth/token", self.apple_token)
        app.router.add_get("/auth/keys", self.jwks)
        return app

    async def discovery(self, request: web.Request) -> web.Response:
        self.hits["discovery"] += 1
        return web.json_response(
            {
                "issuer": self.issuer,
                "authorization_endpoint": f"{self.issuer}/auth/authorize",
                "token_endpoint": f"{self.issuer}/auth/token",
                "revocation_endpoint": f"{self.issuer}/auth/revoke",
                "jwks_uri": f"{self.issuer}/auth/keys",
                "response_types_supported": ["code"],
                "response_modes_supported": ["query", "fragment", "form_post"],
                "subject_types_supported": ["pairwise"],
                "id_token_signing_alg_values_supported": ["RS256"],
                "scopes_supported": ["openid", "email", "name"],
                "token_endpoint_auth_methods_supported": ["client_secret_post"],
                "claims_supported": [
                    "aud",
                    "email",
                    "email_verified",
                    "exp",
                    "iat",
                    "is_private_email",
                    "iss",
                    "nonce",
                    "nonce_supported",
                    "real_user_status",
                    "sub",
                    "transfer_sub",
                ],
            }
        )

    async def authorize_form_post(self, request: web.Request) -> web.Response:
        q = request.query
        self.authorize_seen.append(dict(q))
        if q.get("response_mode") != "form_post":
            return web.Response(status=400, text="response_mode must be form_post")
        if q.get("client_id") != self.client_id or q.get("redirect_uri") not in self.redirect_uris:
            return web.Response(status=400, text="invalid_client")
        code = secrets.token_hex(16)
        self.codes[code] = IssuedCode(
            client_id=self.client_id,
            redirect_uri=q["redirect_uri"],
            nonce=q.get("nonce"),
            challenge=q.get("code_challenge", ""),
            user=type(self.user)(**vars(self.user)),
        )
        fields = {"state": q.get("state", ""), "code": code}
        if self.user.sub not in self.user_sent and "name" in q.get("scope", "").split():
            self.user_sent.add(self.user.sub)
            fields["user"] = orjson.dumps(
                {
                    "name": {"firstName": self.user.given_name, "lastName": self.user.family_name},
                    "email": self.user.email,
                }
            ).decode()
        inputs = "".join(
            f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}"/>'
            for k, v in fields.items()
        )
        page = (
            '<html><body onload="document.forms[0].submit()">'
            f'<form method="POST" action="{html.escape(q["redirect_uri"])}">{inputs}</form>'
            "</body></html>"
        )
        return web.Response(text=page, content_type="text/html")

    async def apple_token(self, request: web.Request) -> web.Response:
        form = await request.post()
        if "Authorization" in request.headers:
            return self._refuse(400, "invalid_client", "client auth method")
        try:
            claims = jwt.decode(
                str(form.get("client_secret", "")),
                self.team_key.public_key(),
                algorithms=["ES256"],
                audience=self.issuer,
                issuer=self.team_id,
                options={"require": ["iat", "exp", "sub"]},
            )
            header = jwt.get_unverified_header(str(form.get("client_secret", "")))
        except jwt.PyJWTError as exc:
            return self._refuse(400, "invalid_client", f"client secret: {exc}")
        self.secrets_seen.append({"header": header, "claims": claims})
        if header.get("kid") != self.key_id or claims.get("sub") != self.client_id:
            return self._refuse(400, "invalid_client", "client secret kid or sub")
        if form.get("client_id") != self.client_id:
            return self._refuse(400, "invalid_client", "client id")
        code = self.codes.get(str(form.get("code", "")))
        if code is None or code.used or form.get("redirect_uri") != code.redirect_uri:
            return self._refuse(400, "invalid_grant", "code")
        code.used = True
        claims = self.id_token_claims(code)
        id_token = self.signing.sign(claims)
        return web.json_response(
            {
                "access_token": "a" + secrets.token_hex(16),
                "token_type": "Bearer",
                "expires_in": 3600,
                "refresh_token": "r" + secrets.token_hex(16),
                "id_token": id_token,
            }
        )

    def id_token_claims(self, code: IssuedCode) -> dict[str, Any]:
        claims = super().id_token_claims(code)
        # No names in Apple's ID token; booleans as strings.
        claims.pop("given_name", None)
        claims.pop("family_name", None)
        claims.pop("auth_time", None)
        if "email_verified" in claims:
            claims["email_verified"] = str(claims["email_verified"]).lower()
        claims["is_private_email"] = "false"
        claims["nonce_supported"] = True
        return claims


class _FormReader(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.action = ""
        self.method = ""
        self.fields: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.action, self.method = values.get("action", ""), values.get("method", "")
        elif tag == "input" and values.get("name"):
            self.fields[values["name"]] = values.get("value", "")


def read_form(page: str) -> tuple[str, str, dict[str, str]]:
    """A form_post page's target, method and fields (what the browser will POST)."""
    reader = _FormReader()
    reader.feed(page)
    assert re.search(r"onload=\"document\.forms\[0\]\.submit\(\)\"", page)
    return reader.action, reader.method.upper(), reader.fields
