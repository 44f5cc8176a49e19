"""The SAML sign-in figure (issue 30): the assertion consumer service of an SP-initiated
sign-in, each request a different user joining the account just in time.

Before the clock starts, for each user: `GET /sso/start?connection=` (the AuthnRequest id is
stored, the binding cookie set) and the identity provider's signed answer, built with pysaml2's
own IdP (saml2.server.Server, RSA-2048, SHA-256) as Okta or Entra ID would send it. Timed:
`POST /sso/saml/{id}/acs`, 8 at once: pysaml2's schema validation and xmlsec1 signature check
(a child process per answer), the audience/recipient/time/InResponseTo checks, the single-use
request and replay-cache rows, the new verified user, the membership within the seat cap under
the account lock, and the session.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import psycopg2
import saml2
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from saml2 import saml, xmldsig
from saml2.assertion import Policy
from saml2.config import IdPConfig
from saml2.server import Server

USERS = int(os.environ.get("BENCH_SSO_USERS", "200"))  # fewer for a quick look
CONCURRENCY = 8
IDP_ENTITY_ID = "https://idp.bench.example/metadata"
IDP_SSO_URL = "https://idp.bench.example/sso"
DOMAIN = "sso.bench.example.com"


def _keypair(directory: Path) -> tuple[str, str, str]:
    """The IdP's key file, certificate file and certificate PEM."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bench idp")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=7))
        .sign(key, hashes.SHA256())
    )
    key_file, cert_file = directory / "idp-key.pem", directory / "idp-cert.pem"
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    cert_file.write_bytes(pem)
    return str(key_file), str(cert_file), pem.decode()


def _seed(dsn: str, certificate_pem: str) -> str:
    """An account with room for every user and a SAML connection for DOMAIN; its id."""
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("DELETE FROM sso_connection_domains WHERE domain = %s", (DOMAIN,))
        cur.execute("INSERT INTO accounts (name) VALUES ('SSO bench') RETURNING id")
        account_id = cur.fetchone()[0]
        cur.execute(
            "INSERT INTO account_plans (account_id, plan_code, seats) VALUES (%s, 'business', %s)",
            (account_id, USERS + 10),
        )
        cur.execute(
            "INSERT INTO sso_connections (account_id, type, idp_entity_id, idp_sso_url,"
            " idp_certificate) VALUES (%s, 'saml', %s, %s, %s) RETURNING id",
            (account_id, IDP_ENTITY_ID, IDP_SSO_URL, certificate_pem),
        )
        connection_id = str(cur.fetchone()[0])
        cur.execute(
            "INSERT INTO sso_connection_domains (domain, connection_id, account_id)"
            " VALUES (%s, %s, %s)",
            (DOMAIN, connection_id, account_id),
        )
    return connection_id


def _idp(key_file: str, cert_file: str, sp_metadata: str) -> Server:
    config = IdPConfig()
    config.load(
        {
            "entityid": IDP_ENTITY_ID,
            "xmlsec_binary": "/usr/bin/xmlsec1",
            "key_file": key_file,
            "cert_file": cert_file,
            "service": {
                "idp": {
                    "endpoints": {
                        "single_sign_on_service": [(IDP_SSO_URL, saml2.BINDING_HTTP_REDIRECT)]
                    },
                }
            },
            "metadata": {"inline": [sp_metadata]},
        }
    )
    return Server(config=config)


async def _prepare(
    session: aiohttp.ClientSession, url: str, connection_id: str, idp: Server, run: str
) -> list[dict[str, Any]]:
    """Start USERS sign-ins and have the IdP answer each (untimed)."""
    acs = f"/sso/saml/{connection_id}/acs"
    policy = Policy(
        {"default": {"lifetime": {"minutes": 30}, "attribute_restrictions": None}},
        mds=idp.metadata,
    )
    prepared = []
    for i in range(USERS):
        async with session.get(
            f"{url}/sso/start", params={"connection": connection_id}, allow_redirects=False
        ) as response:
            assert response.status == 302, await response.text()
            location = response.headers["Location"]
            binding = response.cookies["sso_binding"].value
        request = idp.parse_authn_request(
            parse_qs(urlsplit(location).query)["SAMLRequest"][0], saml2.BINDING_HTTP_REDIRECT
        )
        email = f"sso-{run}-{i}@{DOMAIN}"
        answer = idp.create_authn_response(
            identity={"email": [email], "givenName": ["Bench"]},
            in_response_to=request.message.id,
            destination=request.message.assertion_consumer_service_url,
            sp_entity_id=request.message.issuer.text,
            name_id=saml.NameID(format=saml.NAMEID_FORMAT_EMAILADDRESS, text=email),
            userid=email,
            sign_assertion=True,
            sign_response=False,
            authn={"class_ref": saml.AUTHN_PASSWORD_PROTECTED},
            release_policy=policy,
            sign_alg=xmldsig.SIG_RSA_SHA256,
            digest_alg=xmldsig.DIGEST_SHA256,
        )
        prepared.append(
            {
                "path": acs,
                "form": {
                    "SAMLResponse": base64.b64encode(str(answer).encode()).decode(),
                    "RelayState": "/",
                },
                "cookie": f"sso_binding={binding}",
            }
        )
    return prepared


async def _drive(url: str, connection_id: str, idp: Server) -> dict[str, Any]:
    run = uuid.uuid4().hex[:8]
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as session:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        for item in await _prepare(session, url, connection_id, idp, run):
            queue.put_nowait(item)
        latencies: list[float] = []
        errors = 0

        async def worker() -> None:
            nonlocal errors
            while not queue.empty():
                item = queue.get_nowait()
                started = time.perf_counter()
                async with session.post(
                    url + item["path"],
                    data=item["form"],
                    headers={"Cookie": item["cookie"], "Origin": "https://idp.bench.example"},
                    allow_redirects=False,
                ) as response:
                    await response.read()
                    if response.status != 302 or response.headers["Location"] != "/":
                        errors += 1
                latencies.append((time.perf_counter() - started) * 1000)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "rps": round(USERS / elapsed, 1),
        "p50_ms": round(latencies[len(latencies) // 2], 2),
        "p99_ms": round(latencies[max(int(len(latencies) * 0.99) - 1, 0)], 2),
        "requests": USERS,
        "concurrency": CONCURRENCY,
        "errors": errors,
    }


def saml_sign_in(server_url: str, dsn: str, env: dict[str, str], plan: Any) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tenantd-bench-idp-") as directory:
        key_file, cert_file, certificate_pem = _keypair(Path(directory))
        connection_id = _seed(dsn, certificate_pem)

        async def run() -> dict[str, Any]:
            metadata_url = f"{server_url}/sso/saml/{connection_id}/metadata"
            async with aiohttp.ClientSession() as session, session.get(metadata_url) as r:
                assert r.status == 200, await r.text()
                sp_metadata = await r.text()
            return await _drive(server_url, connection_id, _idp(key_file, cert_file, sp_metadata))

        return asyncio.run(run())
