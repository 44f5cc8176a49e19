"""Where the hosted pages can offer passkeys (their other knobs are settings sections: TENANTD_UI
is `WebSettings.hosted_pages`, the brand `BrandSettings`, the templates `PageSettings`)."""

from __future__ import annotations

from urllib.parse import urlsplit

from tenantd.identity.settings import IdentitySettings
from tenantd.settings import Settings, is_ip_address

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
