"""Local fakes of the outside services sign-in asks: Pwned Passwords' range API and a bot-check
siteverify endpoint, speaking their real wire formats."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


def sha1_hex(password: str) -> str:
    return hashlib.sha1(password.encode(), usedforsecurity=False).hexdigest().upper()


@dataclass
class FakePwned:
    """GET /range/{5 hex}: `SUFFIX:COUNT` lines (CRLF) of the known hashes under the prefix;
    with `Add-Padding: true`, hundreds of made-up suffixes with count 0, as the real API."""

    breached: dict[str, int] = field(default_factory=dict)  # full SHA-1 hex -> count
    requests: list[dict[str, Any]] = field(default_factory=list)
    delay: float = 0.0
    status: int = 200
    url: str = ""

    def add(self, password: str, count: int) -> None:
        self.breached[sha1_hex(password)] = count

    def pad_with(self, password: str) -> None:
        """Put the password's suffix in as a padding line (count 0): not a breach."""
        self.breached[sha1_hex(password)] = 0

    async def range(self, request: web.Request) -> web.Response:
        prefix = request.match_info["prefix"]
        self.requests.append({"path": request.path, "headers": dict(request.headers)})
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.status != 200:
            return web.Response(status=self.status, text="error")
        if len(prefix) != 5 or any(c not in "0123456789ABCDEF" for c in prefix):
            return web.Response(status=400, text="The hash prefix was not in a valid format")
        lines = [
            f"{full[5:]}:{count}" for full, count in self.breached.items() if full[:5] == prefix
        ]
        if request.headers.get("Add-Padding") == "true":
            lines += [f"{secrets.token_hex(18)[:35].upper()}:0" for _ in range(800)]
        return web.Response(text="\r\n".join(lines), content_type="text/plain")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/range/{prefix}", self.range)
        return app


@dataclass
class FakeSiteverify:
    """POST (form-encoded `secret`, `response`, `remoteip`) -> JSON `{success, error-codes,
    challenge_ts, hostname}`; tokens in `good` pass once each (they are single use)."""

    secret: str = "captcha-secret"
    good: set[str] = field(default_factory=set)
    calls: list[dict[str, str]] = field(default_factory=list)
    url: str = ""

    async def siteverify(self, request: web.Request) -> web.Response:
        if request.content_type != "application/x-www-form-urlencoded":
            return web.json_response({"success": False, "error-codes": ["bad-request"]})
        form = {k: str(v) for k, v in (await request.post()).items()}
        self.calls.append(form)
        if form.get("secret") != self.secret:
            return web.json_response({"success": False, "error-codes": ["invalid-input-secret"]})
        token = form.get("response", "")
        if token not in self.good:
            return web.json_response({"success": False, "error-codes": ["invalid-input-response"]})
        self.good.discard(token)
        return web.json_response(
            {
                "success": True,
                "challenge_ts": "2026-11-27T08:00:00Z",
                "hostname": "127.0.0.1",
                "error-codes": [],
            }
        )

    def token(self) -> str:
        token = secrets.token_urlsafe(24)
        self.good.add(token)
        return token

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/siteverify", self.siteverify)
        return app
