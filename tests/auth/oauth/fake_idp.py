"""A local OpenID provider speaking the real wire format: discovery, /authorize (redirects
back with a code), /token (client auth, redirect_uri and PKCE S256 checks, single-use codes,
RS256 ID tokens signed with keys generated here), /userinfo (Bearer access tokens) and /jwks
(with key rotation).

Knobs on the instance let a test misbehave on purpose: claim overrides, a custom signer, an
error answer from /authorize, another token endpoint auth method (the client's registration)
and the methods discovery advertises, email and profile claims only from /userinfo (as
panva's oidc-provider does by default), userinfo overrides, discovery overrides.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import itertools
import secrets
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlencode

import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm


@dataclass
class FakeUser:
    sub: str = "fake-subject-1"
    email: str | None = "alice@example.org"
    email_verified: Any = True  # None: leave the claim out
    given_name: str = "Alice"
    family_name: str = "Liddell"


@dataclass
class SigningKey:
    kid: str
    algorithm: str
    private_key: Any

    @classmethod
    def rsa(cls, kid: str | None = None) -> SigningKey:
        # RSA generation is slow; consecutive calls cycle through a few distinct keys.
        key = _rsa_key(next(_rsa_turn) % 4)
        return cls(kid or f"rsa-{uuid.uuid4().hex[:8]}", "RS256", key)

    @classmethod
    def ec(cls, kid: str | None = None) -> SigningKey:
        key = ec.generate_private_key(ec.SECP256R1())
        return cls(kid or f"ec-{uuid.uuid4().hex[:8]}", "ES256", key)

    def public_jwk(self) -> dict[str, Any]:
        if self.algorithm == "RS256":
            jwk = RSAAlgorithm.to_jwk(self.private_key.public_key(), as_dict=True)
        else:
            jwk = ECAlgorithm.to_jwk(self.private_key.public_key(), as_dict=True)
        return {**jwk, "kid": self.kid, "use": "sig", "alg": self.algorithm}

    def sign(self, claims: dict[str, Any], headers: dict[str, Any] | None = None) -> str:
        return jwt.encode(
            claims,
            self.private_key,
            algorithm=self.algorithm,
            headers={"kid": self.kid, **(headers or {})},
        )


_rsa_turn = itertools.count()


@functools.cache
def _rsa_key(index: int) -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class IssuedCode:
    client_id: str
    redirect_uri: str
    nonce: str | None
    challenge: str
    user: FakeUser
    used: bool = False


@dataclass
class FakeIdP:
    client_id: str
    client_secret: str
    redirect_uris: set[str]
    issuer: str = ""  # set once the server listens
    auth_method: str = "client_secret_basic"
    user: FakeUser = field(default_factory=FakeUser)
    signing: SigningKey = field(default_factory=SigningKey.rsa)
    published: list[SigningKey] = field(default_factory=list)
    claim_overrides: dict[str, Any] = field(default_factory=dict)  # value None drops the claim
    signer: Callable[[dict[str, Any]], str] | None = None  # replaces the normal signature
    authorize_error: str | None = None  # answer /authorize with ?error=...
    iss_in_callback: str | None = None  # add `iss` to the callback (RFC 9207)
    discovery_overrides: dict[str, Any] = field(default_factory=dict)
    hits: Counter[str] = field(default_factory=Counter)
    codes: dict[str, IssuedCode] = field(default_factory=dict)
    issued_id_tokens: list[str] = field(default_factory=list)
    token_refusals: list[str] = field(default_factory=list)  # why /token refused, in order
    client_auth_seen: list[str] = field(default_factory=list)  # basic | post
    # token_endpoint_auth_methods_supported; None: only `auth_method` (what /token requires)
    advertised_auth_methods: list[str] | None = None
    # False: the ID token carries no email or profile claims; /userinfo gives them (OIDC
    # Core 5.4, oidc-provider's default when an access token is issued).
    claims_in_id_token: bool = True
    userinfo_overrides: dict[str, Any] = field(default_factory=dict)  # value None drops it
    userinfo_status: int = 200
    access_tokens: dict[str, FakeUser] = field(default_factory=dict)
    userinfo_auth_seen: list[str] = field(default_factory=list)  # bearer | none
    authorize_seen: list[dict[str, str]] = field(default_factory=list)  # each /authorize query

    def __post_init__(self) -> None:
        if not self.published:
            self.published = [self.signing]

    # --- knobs ------------------------------------------------------------------------------

    def rotate(self, *, keep_old: bool = False, key: SigningKey | None = None) -> SigningKey:
        """Sign with a new key from now on; publish it (and the old one if keep_old)."""
        new = key or SigningKey.rsa()
        self.published = [*self.published, new] if keep_old else [new]
        self.signing = new
        return new

    def id_token_claims(self, code: IssuedCode) -> dict[str, Any]:
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "sub": code.user.sub,
            "aud": self.client_id,
            "iat": now,
            "exp": now + 300,
            "auth_time": now,
            "given_name": code.user.given_name,
            "family_name": code.user.family_name,
        }
        if code.nonce is not None:
            claims["nonce"] = code.nonce
        if self.claims_in_id_token:
            claims.update(self.email_claims(code.user))
        else:
            del claims["given_name"], claims["family_name"]
        for name, value in self.claim_overrides.items():
            if value is None:
                claims.pop(name, None)
            else:
                claims[name] = value
        return claims

    @staticmethod
    def email_claims(user: FakeUser) -> dict[str, Any]:
        claims: dict[str, Any] = {}
        if user.email is not None:
            claims["email"] = user.email
        if user.email_verified is not None:
            claims["email_verified"] = user.email_verified
        return claims

    # --- the HTTP app -----------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", self.discovery)
        app.router.add_get("/authorize", self.authorize)
        app.router.add_post("/token", self.token)
        app.router.add_get("/jwks", self.jwks)
        app.router.add_route("*", "/userinfo", self.userinfo)
        return app

    async def discovery(self, request: web.Request) -> web.Response:
        self.hits["discovery"] += 1
        document = {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "jwks_uri": f"{self.issuer}/jwks",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256", "ES256"],
            "userinfo_endpoint": f"{self.issuer}/userinfo",
            "token_endpoint_auth_methods_supported": self.advertised_auth_methods
            or [self.auth_method],
            "code_challenge_methods_supported": ["S256"],
            "scopes_supported": ["openid", "email", "profile"],
            **self.discovery_overrides,
        }
        return web.json_response(document)

    async def jwks(self, request: web.Request) -> web.Response:
        self.hits["jwks"] += 1
        return web.json_response({"keys": [k.public_jwk() for k in self.published]})

    async def authorize(self, request: web.Request) -> web.Response:
        self.hits["authorize"] += 1
        q = request.query
        self.authorize_seen.append(dict(q))
        if q.get("client_id") != self.client_id:
            return web.Response(status=400, text="unknown client")
        redirect_uri = q.get("redirect_uri", "")
        if redirect_uri not in self.redirect_uris:
            return web.Response(status=400, text="redirect_uri not registered")
        if q.get("response_type") != "code" or "openid" not in q.get("scope", "").split():
            return web.Response(status=400, text="unsupported request")
        if q.get("code_challenge_method") != "S256" or not q.get("code_challenge"):
            return web.Response(status=400, text="PKCE S256 required")
        back: dict[str, str] = {"state": q.get("state", "")}
        if self.authorize_error is not None:
            back["error"] = self.authorize_error
            back["error_description"] = "The user said no"
        else:
            code = secrets.token_urlsafe(24)
            self.codes[code] = IssuedCode(
                client_id=self.client_id,
                redirect_uri=redirect_uri,
                nonce=q.get("nonce"),
                challenge=q["code_challenge"],
                user=FakeUser(**vars(self.user)),
            )
            back["code"] = code
        if self.iss_in_callback is not None:
            back["iss"] = self.iss_in_callback
        raise web.HTTPFound(f"{redirect_uri}?{urlencode(back)}")

    def _refuse(self, status: int, error: str, why: str) -> web.Response:
        self.token_refusals.append(why)
        return web.json_response({"error": error}, status=status)

    def _client(self, request: web.Request, form: Any) -> tuple[str | None, str | None, str]:
        header = request.headers.get("Authorization", "")
        if header.startswith("Basic "):
            try:
                decoded = base64.b64decode(header[6:], validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                return None, None, "basic"
            client_id, _, secret = decoded.partition(":")
            return unquote(client_id), unquote(secret), "basic"
        return form.get("client_id"), form.get("client_secret"), "post"

    async def token(self, request: web.Request) -> web.Response:
        self.hits["token"] += 1
        form = await request.post()
        client_id, secret, method = self._client(request, form)
        self.client_auth_seen.append(method)
        expected = "basic" if self.auth_method == "client_secret_basic" else "post"
        if method != expected:
            return self._refuse(401, "invalid_client", "client auth method")
        if client_id != self.client_id or secret != self.client_secret:
            return self._refuse(401, "invalid_client", "client credentials")
        if form.get("grant_type") != "authorization_code":
            return self._refuse(400, "unsupported_grant_type", "grant type")
        code = self.codes.get(str(form.get("code", "")))
        if code is None:
            return self._refuse(400, "invalid_grant", "unknown code")
        if code.used:
            return self._refuse(400, "invalid_grant", "code replayed")
        code.used = True
        if form.get("redirect_uri") != code.redirect_uri:
            return self._refuse(400, "invalid_grant", "redirect_uri mismatch")
        verifier = str(form.get("code_verifier", ""))
        if not 43 <= len(verifier) <= 128:
            return self._refuse(400, "invalid_grant", "pkce verifier malformed")
        if b64url(hashlib.sha256(verifier.encode()).digest()) != code.challenge:
            return self._refuse(400, "invalid_grant", "pkce mismatch")
        claims = self.id_token_claims(code)
        id_token = self.signer(claims) if self.signer else self.signing.sign(claims)
        self.issued_id_tokens.append(id_token)
        access_token = secrets.token_urlsafe(24)
        self.access_tokens[access_token] = code.user
        return web.json_response(
            {
                "access_token": access_token,
                "token_type": "Bearer",
                "expires_in": 300,
                "id_token": id_token,
            }
        )

    async def userinfo(self, request: web.Request) -> web.Response:
        """OIDC Core 5.3: the claims of the access token's user; RFC 6750 errors otherwise."""
        self.hits["userinfo"] += 1
        header = request.headers.get("Authorization", "")
        self.userinfo_auth_seen.append("bearer" if header.startswith("Bearer ") else "none")
        user = self.access_tokens.get(header.removeprefix("Bearer ")) if header else None
        if user is None:
            return web.Response(
                status=401, headers={"WWW-Authenticate": 'Bearer error="invalid_token"'}
            )
        if self.userinfo_status != 200:
            return web.json_response({"error": "server_error"}, status=self.userinfo_status)
        claims: dict[str, Any] = {
            "sub": user.sub,
            **self.email_claims(user),
            "given_name": user.given_name,
            "family_name": user.family_name,
        }
        for name, value in self.userinfo_overrides.items():
            if value is None:
                claims.pop(name, None)
            else:
                claims[name] = value
        return web.json_response(claims)
