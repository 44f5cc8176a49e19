"""A SAML identity provider built with pysaml2's own IdP (saml2.server.Server), a library
tenantd did not write: its key and self-signed certificate are generated here with
`cryptography`, its answers are signed by xmlsec1 as a real IdP's are. Tests tamper with the
answers it gives (unsigned, another key, another audience, expired, wrapped)."""

from __future__ import annotations

import base64
import datetime as dt
import functools
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import saml2
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from saml2 import saml, xmldsig
from saml2.assertion import Policy
from saml2.config import IdPConfig
from saml2.metadata import create_metadata_string
from saml2.server import Server

ENTITY_ID = "https://idp.example.test/metadata"
SSO_URL = "https://idp.example.test/sso"


@functools.cache
def keypair(index: int = 0) -> tuple[bytes, bytes]:
    """(private key PEM, certificate PEM), one per index for the whole run (RSA is slow)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"test idp {index}")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


@dataclass
class SamlIdp:
    directory: Path
    key_index: int = 0
    entity_id: str = ENTITY_ID
    sso_url: str = SSO_URL
    sp_metadata: list[str] = field(default_factory=list)
    signing_algorithm: str = xmldsig.SIG_RSA_SHA256
    digest_algorithm: str = xmldsig.DIGEST_SHA256

    @property
    def certificate_pem(self) -> str:
        return keypair(self.key_index)[1].decode()

    def metadata_xml(self) -> str:
        """The IdP's own metadata document (what an admin downloads from Okta or Entra ID)."""
        document = create_metadata_string(None, config=self._config(), sign=False)
        return document.decode() if isinstance(document, bytes) else str(document)

    def _config(self) -> IdPConfig:
        key_pem, cert_pem = keypair(self.key_index)
        key_file = self.directory / f"idp-key-{self.key_index}.pem"
        cert_file = self.directory / f"idp-cert-{self.key_index}.pem"
        key_file.write_bytes(key_pem)
        cert_file.write_bytes(cert_pem)
        config = IdPConfig()
        config.load(
            {
                "entityid": self.entity_id,
                "xmlsec_binary": "/usr/bin/xmlsec1",
                "key_file": str(key_file),
                "cert_file": str(cert_file),
                "signing_algorithm": self.signing_algorithm,
                "digest_algorithm": self.digest_algorithm,
                "service": {
                    "idp": {
                        "endpoints": {
                            "single_sign_on_service": [(self.sso_url, saml2.BINDING_HTTP_REDIRECT)]
                        },
                        "policy": {
                            "default": {
                                "lifetime": {"minutes": 5},
                                "attribute_restrictions": None,
                                "name_form": saml.NAME_FORMAT_URI,
                            }
                        },
                    }
                },
                "metadata": {"inline": list(self.sp_metadata)} if self.sp_metadata else {},
            }
        )
        return config

    def server(self) -> Server:
        return Server(config=self._config())

    def request_id(self, location: str) -> str:
        """The id of the AuthnRequest the SP sent (the browser's redirect to the IdP)."""
        query = parse_qs(urlsplit(location).query)
        request = self.server().parse_authn_request(
            query["SAMLRequest"][0], saml2.BINDING_HTTP_REDIRECT
        )
        return str(request.message.id)

    def answer(
        self,
        *,
        sp_entity_id: str,
        acs_url: str,
        email: str,
        in_response_to: str | None,
        attributes: dict[str, list[str]] | None = None,
        sign_assertion: bool = True,
        lifetime_minutes: int = 5,
    ) -> str:
        """A base64 SAMLResponse as the IdP's HTTP-POST binding carries it."""
        server = self.server()
        policy = Policy(
            {
                "default": {
                    "lifetime": {"minutes": lifetime_minutes},
                    "attribute_restrictions": None,
                    "name_form": saml.NAME_FORMAT_URI,
                }
            },
            mds=server.metadata,
        )
        identity = {"email": [email], **(attributes or {})}
        response = server.create_authn_response(
            identity=identity,
            in_response_to=in_response_to,
            destination=acs_url,
            sp_entity_id=sp_entity_id,
            name_id=saml.NameID(format=saml.NAMEID_FORMAT_EMAILADDRESS, text=email),
            userid=email,
            sign_assertion=sign_assertion,
            sign_response=False,
            authn={"class_ref": saml.AUTHN_PASSWORD_PROTECTED},
            release_policy=policy,
            sign_alg=self.signing_algorithm,
            digest_alg=self.digest_algorithm,
        )
        return base64.b64encode(str(response).encode()).decode()


def decode(saml_response: str) -> str:
    return base64.b64decode(saml_response).decode()


def encode(xml: str) -> str:
    return base64.b64encode(xml.encode()).decode()
