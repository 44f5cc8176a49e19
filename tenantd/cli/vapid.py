"""`tenantd vapid generate`: a fresh VAPID key set for the web push channel."""

from __future__ import annotations

import base64
import sys

import typer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tenantd.cli.common import fail

app = typer.Typer(help="Web push VAPID keys.", no_args_is_help=True)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def generate_keys() -> tuple[str, str]:
    """(public: base64url uncompressed P-256 point, private: base64url raw 32 bytes)."""
    key = ec.generate_private_key(ec.SECP256R1())
    public = key.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    private = key.private_numbers().private_value.to_bytes(32, "big")
    return b64url(public), b64url(private)


@app.command("generate")
def generate(
    subject: str = typer.Option(
        "mailto:admin@example.com",
        "--subject",
        help="Contact for push services: a mailto: or https: URL.",
    ),
) -> None:
    """Print WEB_PUSH_VAPID_PUBLIC_KEY, _PRIVATE_KEY and _SUBJECT as NAME=value lines.

    Example: tenantd vapid generate --subject mailto:ops@example.com >> tenantd.env
    """
    if not subject.startswith(("mailto:", "https://")):
        fail("--subject must be a mailto: or https: URL", 2)
    public, private = generate_keys()
    sys.stdout.write(
        f"WEB_PUSH_VAPID_PUBLIC_KEY={public}\n"
        f"WEB_PUSH_VAPID_PRIVATE_KEY={private}\n"
        f"WEB_PUSH_VAPID_SUBJECT={subject}\n"
    )
