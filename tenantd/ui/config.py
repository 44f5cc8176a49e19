"""Hosted pages' knobs, from their settings sections: TENANTD_UI turns the pages on (default)
or off, the others restyle them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from tenantd.email.settings import DEFAULT_ACCENT, DEFAULT_BRAND_NAME, BrandSettings
from tenantd.identity.settings import IdentitySettings
from tenantd.settings import Settings, is_ip_address
from tenantd.ui.settings import PageSettings


@dataclass(frozen=True)
class UiConfig:
    enabled: bool = True
    brand_name: str = DEFAULT_BRAND_NAME
    logo_url: str | None = None
    accent_color: str = DEFAULT_ACCENT
    templates_dir: Path | None = None


def ui_config(settings: Settings) -> UiConfig:
    pages = settings.section(PageSettings)
    brand = settings.section(BrandSettings)
    return UiConfig(
        enabled=settings.web.hosted_pages,
        brand_name=brand.brand_name,
        logo_url=brand.logo_url,
        accent_color=brand.accent_color,
        templates_dir=pages.templates_dir.absolute() if pages.templates_dir else None,
    )


# -- passkeys on the pages (issue 25 item 19) ---------------------------------------------------


def passkeys_here(settings: Settings, host: str) -> bool:
    """Whether a page served at `host` (its Host header) can use passkeys: the relying party
    id is a domain (browsers refuse an IP address) and the page's origin is a WebAuthn origin.
    Elsewhere the pages hide them rather than fail on every /login."""
    identity = settings.section(IdentitySettings)
    if is_ip_address(identity.webauthn_rp_id):
        return False
    scheme = urlsplit(settings.public_base_url).scheme or "http"
    return f"{scheme}://{host}" in identity.webauthn_origins


def passkeys_notice(settings: Settings) -> str | None:
    """Why the pages at PUBLIC_BASE_URL show no passkeys (logged once at start-up), or None."""
    parts = urlsplit(settings.public_base_url)
    identity = settings.section(IdentitySettings)
    if is_ip_address(identity.webauthn_rp_id):
        return (
            f"passkeys are off: the WebAuthn relying party id {identity.webauthn_rp_id} is an IP"
            " address, which browsers refuse; serve tenantd under a domain name (PUBLIC_BASE_URL"
            " or WEBAUTHN_RP_ID)"
        )
    if not passkeys_here(settings, parts.netloc):
        return (
            f"passkeys are hidden on pages opened at {parts.scheme}://{parts.netloc}: browsers"
            f" refuse an IP address as a relying party; they work at"
            f" {', '.join(identity.webauthn_origins)} (relying party {identity.webauthn_rp_id})"
        )
    return None
