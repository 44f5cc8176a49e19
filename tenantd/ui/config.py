"""Hosted pages' knobs, parsed from `Settings.extra` (every TENANTD_* variable) once per
process: TENANTD_UI turns the pages on (default) or off, the others restyle them."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from urllib.parse import urlsplit

from tenantd.email.templates import ACCENT_COLOR as _COLOR
from tenantd.email.templates import DEFAULT_ACCENT, DEFAULT_BRAND_NAME
from tenantd.settings import Settings, SettingsError, is_ip_address


@dataclass(frozen=True)
class UiConfig:
    enabled: bool = True
    brand_name: str = DEFAULT_BRAND_NAME
    logo_url: str | None = None
    accent_color: str = DEFAULT_ACCENT
    templates_dir: Path | None = None


def _flag(value: str, name: str) -> bool:
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise SettingsError(f"{name} must be a boolean (true/false), got {value!r}")


def ui_config(settings: Settings) -> UiConfig:
    return _parse(
        tuple(sorted((k, v) for k, v in settings.extra.items() if k.startswith("TENANTD_UI")))
    )


@cache
def _parse(items: tuple[tuple[str, str], ...]) -> UiConfig:
    env = dict(items)
    accent = env.get("TENANTD_UI_ACCENT_COLOR", "").strip() or DEFAULT_ACCENT
    if not _COLOR.match(accent):
        raise SettingsError(f"TENANTD_UI_ACCENT_COLOR must be a #rgb or #rrggbb colour: {accent!r}")
    templates = env.get("TENANTD_UI_TEMPLATES_DIR", "").strip()
    return UiConfig(
        enabled=_flag(env.get("TENANTD_UI", "true") or "true", "TENANTD_UI"),
        brand_name=env.get("TENANTD_UI_BRAND_NAME", "").strip() or DEFAULT_BRAND_NAME,
        logo_url=env.get("TENANTD_UI_LOGO_URL", "").strip() or None,
        accent_color=accent,
        templates_dir=Path(templates).absolute() if templates else None,
    )


# -- passkeys on the pages (issue 25 item 19) ---------------------------------------------------


def passkeys_here(settings: Settings, host: str) -> bool:
    """Whether a page served at `host` (its Host header) can use passkeys: the relying party
    id is a domain (browsers refuse an IP address) and the page's origin is a WebAuthn origin.
    Elsewhere the pages hide them rather than fail on every /login."""
    if is_ip_address(settings.webauthn_rp_id):
        return False
    scheme = urlsplit(settings.public_base_url).scheme or "http"
    return f"{scheme}://{host}" in settings.webauthn_origins


def passkeys_notice(settings: Settings) -> str | None:
    """Why the pages at PUBLIC_BASE_URL show no passkeys (logged once at start-up), or None."""
    parts = urlsplit(settings.public_base_url)
    if is_ip_address(settings.webauthn_rp_id):
        return (
            f"passkeys are off: the WebAuthn relying party id {settings.webauthn_rp_id} is an IP"
            " address, which browsers refuse; serve tenantd under a domain name (PUBLIC_BASE_URL"
            " or WEBAUTHN_RP_ID)"
        )
    if not passkeys_here(settings, parts.netloc):
        return (
            f"passkeys are hidden on pages opened at {parts.scheme}://{parts.netloc}: browsers"
            f" refuse an IP address as a relying party; they work at"
            f" {', '.join(settings.webauthn_origins)} (relying party {settings.webauthn_rp_id})"
        )
    return None
