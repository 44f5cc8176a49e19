"""A real SMTP server (aiosmtpd) in a thread of the test process, with a generated certificate.

Recipients whose local part starts with `gone` are refused `550 5.1.1`, `blocked` with a
policy `550 5.7.1`, `busy` with `451 4.3.0` the first `busy_refusals` times.
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

USER = "mailer"
PASSWORD = "s3cret-smtp-pa55"


def self_signed(directory: Path, *, name: str = "localhost") -> tuple[Path, Path]:
    """A self-signed certificate for `localhost` and 127.0.0.1; returns (cert, key) paths."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(name), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path = directory / "smtp-cert.pem"
    key_path = directory / "smtp-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Received:
    sender: str
    recipients: list[str]
    message: Message
    tls: bool
    login: str | None


@dataclass
class Handler:
    busy_refusals: int = 1
    received: list[Received] = field(default_factory=list)
    rcpt_attempts: list[str] = field(default_factory=list)
    logins: list[tuple[str, str]] = field(default_factory=list)

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, options: Any
    ) -> str:
        self.rcpt_attempts.append(address)
        local = address.split("@", 1)[0].lower()
        if local.startswith("gone"):
            return f"550 5.1.1 <{address}>: Recipient address rejected: User unknown"
        if local.startswith("blocked"):
            return "550 5.7.1 Message rejected by policy"
        if local.startswith("busy") and self.rcpt_attempts.count(address) <= self.busy_refusals:
            return "451 4.3.0 Try again later"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        login = session.auth_data if isinstance(session.auth_data, str) else None
        self.received.append(
            Received(
                sender=envelope.mail_from,
                recipients=list(envelope.rcpt_tos),
                message=message_from_bytes(envelope.original_content),
                tls=server.transport.get_extra_info("ssl_object") is not None,
                login=login if session.authenticated else None,
            )
        )
        return "250 Message accepted for delivery"


def authenticator(handler: Handler) -> Any:
    def check(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
        if not isinstance(data, LoginPassword):
            return AuthResult(success=False, handled=False)
        login, password = data.login.decode(), data.password.decode()
        handler.logins.append((login, password))
        if (login, password) != (USER, PASSWORD):
            return AuthResult(success=False, handled=False)  # aiosmtpd answers 535
        return AuthResult(success=True, auth_data=login)

    return check


class FakeSmtp:
    """Start with `mode` `plain` (no TLS, no auth), `starttls` (STARTTLS required, then AUTH
    required) or `tls` (implicit TLS, AUTH offered)."""

    def __init__(self, directory: Path, *, mode: str = "plain", busy_refusals: int = 1):
        self.handler = Handler(busy_refusals=busy_refusals)
        self.port = free_port()
        self.cert, key = self_signed(directory)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, key)
        kwargs: dict[str, Any] = {}
        if mode == "starttls":
            kwargs = {
                "tls_context": context,
                "require_starttls": True,
                "auth_required": True,
                "authenticator": authenticator(self.handler),
            }
        elif mode == "tls":
            kwargs = {
                "ssl_context": context,
                "auth_require_tls": False,  # aiosmtpd only counts STARTTLS; this socket is TLS
                "authenticator": authenticator(self.handler),
            }
        self.controller = Controller(self.handler, hostname="127.0.0.1", port=self.port, **kwargs)

    def __enter__(self) -> FakeSmtp:
        self.controller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.controller.stop()

    @property
    def received(self) -> list[Received]:
        return self.handler.received
