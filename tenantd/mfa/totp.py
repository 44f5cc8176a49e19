"""RFC 6238 codes (pyotp): 30-second steps, 6 digits, one step of clock drift either way.

`matching_step` says which time step a code belongs to; the caller accepts it only when that
step is newer than the last one accepted (a code is good once: replays are refused).
"""

from __future__ import annotations

import hmac
import time

import pyotp
import segno

TOTP_SECRET_INFO = b"tenantd/mfa/totp-secret/v1"  # the label its secrets are sealed under
PERIOD = 30
DIGITS = 6
DRIFT_STEPS = 1
ISSUER = "tenantd"


def new_secret() -> str:
    """160 random bits, base32 (RFC 4226's recommended length)."""
    return pyotp.random_base32(length=32)


def provisioning_uri(secret: str, *, account: str, issuer: str = ISSUER) -> str:
    return pyotp.TOTP(secret, digits=DIGITS, interval=PERIOD).provisioning_uri(
        name=account, issuer_name=issuer
    )


def qr_svg(uri: str) -> str:
    """The otpauth URI as an SVG QR code (an authenticator app scans it)."""
    return str(segno.make(uri, error="m").svg_inline(scale=4))


def step_of(now: float) -> int:
    return int(now // PERIOD)


def matching_step(secret: str, code: str, *, now: float | None = None) -> int | None:
    """The time step (within the drift) whose code this is, or None."""
    code = code.strip().replace(" ", "")
    if len(code) != DIGITS or not code.isdigit():
        return None
    moment = time.time() if now is None else now
    totp = pyotp.TOTP(secret, digits=DIGITS, interval=PERIOD)
    current = step_of(moment)
    found = None
    for step in range(current - DRIFT_STEPS, current + DRIFT_STEPS + 1):
        # Compare every candidate (no early exit): the timing says nothing about which matched.
        if hmac.compare_digest(totp.at(step * PERIOD), code):
            found = step if found is None else max(found, step)
    return found
