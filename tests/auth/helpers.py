"""Helpers of the auth tests: mail links, Set-Cookie parsing, the sign-up round trip."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tenantd.bundle import DOMAINS
from tests.factories import mail_text, read_mails
from tests.helpers import PASSWORD

LINK = re.compile(r"(http://\S+\?token=\S+)")


async def mail_sent(client: Any) -> None:
    """Resend and reset mail leaves from a job after the answer: wait for it (queues off)."""
    await client.server.app[DOMAINS].jobs.drain(10)


def mails_to(mail_dir: Path, address: str) -> list[Any]:
    return [m for m in read_mails(mail_dir) if address in m["To"]]


def link_token(message: Any, path: str) -> str:
    """The token of the link to `path` in a mail's text part."""
    match = LINK.search(mail_text(message))
    assert match is not None, mail_text(message)
    url = urlsplit(match.group(1))
    assert url.path == path, url
    return parse_qs(url.query)["token"][0]


def last_token(mail_dir: Path, address: str, path: str = "/verify-email") -> str:
    """The token of the newest mail to `address` linking to `path` (other mails, such as a
    security notice sent by a job meanwhile, may have arrived after it)."""
    messages = mails_to(mail_dir, address)
    assert messages, f"no mail to {address}"
    for message in reversed(messages):
        match = LINK.search(mail_text(message))
        if match is not None and urlsplit(match.group(1)).path == path:
            return link_token(message, path)
    return link_token(messages[-1], path)  # fails naming what the newest mail links to


def set_cookies(response: Any) -> dict[str, dict[str, str]]:
    """Set-Cookie headers parsed by hand: {name: {"value": ..., attribute(lower): value}}."""
    cookies: dict[str, dict[str, str]] = {}
    for header in response.headers.getall("Set-Cookie", []):
        first, *attributes = [part.strip() for part in header.split(";")]
        name, _, value = first.partition("=")
        parsed = {"value": value}
        for attribute in attributes:
            key, _, attr_value = attribute.partition("=")
            parsed[key.lower()] = attr_value
        cookies[name] = parsed
    return cookies


async def register(client: Any, email: str, password: str = PASSWORD, **names: str) -> Any:
    response = await client.post(
        "/auth/register", json={"email": email, "password": password, **names}
    )
    assert response.status == 200, await response.text()
    return response


async def signed_up(make_client: Any, mail_dir: Path, email: str) -> tuple[Any, dict[str, Any]]:
    """Register and verify `email` in a fresh browser; return (browser, verify data)."""
    browser = await make_client()
    await register(browser, email)
    response = await browser.post("/auth/verify-email", json={"token": last_token(mail_dir, email)})
    body = await response.json()
    assert response.status == 200, body
    return browser, body["data"]
