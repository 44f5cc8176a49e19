"""The default development setup (PUBLIC_BASE_URL=http://127.0.0.1:PORT) and passkeys (issue 25
item 19): browsers refuse an IP address as a WebAuthn relying party, so a loopback address
derives the relying party `localhost` with the matching origin, pages opened at the IP hide
passkeys instead of failing on every /login, and the start-up log says why, once."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest

from tenantd.app.factory import create_app
from tenantd.app.settings import load_settings
from tenantd.identity.settings import IdentitySettings
from tenantd.settings import Settings

LOOPBACK = "http://127.0.0.1:8080"


def with_base(env: dict[str, str], base: str) -> Settings:
    return load_settings(environ={**env, "PUBLIC_BASE_URL": base})


@pytest.mark.parametrize(
    ("base", "rp_id", "origin"),
    [
        ("http://127.0.0.1:8080", "localhost", "http://localhost:8080"),
        ("http://[::1]:9000", "localhost", "http://localhost:9000"),
        ("http://localhost:8080", "localhost", "http://localhost:8080"),
        ("https://id.example.com", "id.example.com", "https://id.example.com"),
    ],
)
def test_the_relying_party_is_a_domain_browsers_accept(
    env: dict[str, str], base: str, rp_id: str, origin: str
) -> None:
    settings = with_base(env, base)
    assert settings.section(IdentitySettings).webauthn_rp_id == rp_id
    assert settings.section(IdentitySettings).webauthn_origins == (origin,)


def test_explicit_settings_win(env: dict[str, str]) -> None:
    settings = load_settings(
        environ={
            **env,
            "PUBLIC_BASE_URL": LOOPBACK,
            "WEBAUTHN_RP_ID": "dev.example.test",
            "WEBAUTHN_ORIGINS": "https://dev.example.test",
        }
    )
    assert settings.section(IdentitySettings).webauthn_rp_id == "dev.example.test"
    assert settings.section(IdentitySettings).webauthn_origins == ("https://dev.example.test",)


def passkeys_state(page: str) -> str:
    found = re.search(r'data-passkeys="(on|off)"', page)
    assert found, page[:500]
    return found.group(1)


async def test_login_at_the_ip_hides_passkeys_and_at_localhost_offers_them(
    make_client: Any, settings: Settings
) -> None:
    assert settings.public_base_url.startswith("http://127.0.0.1:")  # the tests' default
    client = await make_client()
    at_ip = await client.get("/login", headers={"Host": "127.0.0.1:8080"})
    assert passkeys_state(await at_ip.text()) == "off"
    at_localhost = await client.get("/login", headers={"Host": "localhost:8080"})
    assert passkeys_state(await at_localhost.text()) == "on"
    # The API's WebAuthn options name the relying party browsers accept.
    options = await (
        await client.post("/api/v1/auth/passkeys/authenticate/options", json={})
    ).json()
    assert options["data"]["rpId"] == "localhost"


def test_the_start_up_log_says_why_once(
    env: dict[str, str], migrated: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tenantd.ui.routes")
    create_app(with_base(env, LOOPBACK), migrated)
    lines = [r.getMessage() for r in caplog.records if "passkeys" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "http://localhost:8080" in lines[0]
    caplog.clear()
    create_app(with_base(env, "http://10.1.2.3:8080"), migrated)
    [line] = [r.getMessage() for r in caplog.records if "passkeys" in r.getMessage()]
    assert "passkeys are off" in line
    caplog.clear()
    create_app(with_base(env, "http://localhost:8080"), migrated)
    assert not [r for r in caplog.records if "passkeys" in r.getMessage()]
