"""The SAML 2.0 service provider of one connection, on pysaml2 (signatures checked by xmlsec1).

Everything here is synchronous (pysaml2 runs xmlsec1 as a child process): the sign-in rules
call it in a worker thread. Each connection is its own service provider: entity id
`{PUBLIC_BASE_URL}/sso/saml/{id}/metadata`, assertion consumer service
`{PUBLIC_BASE_URL}/sso/saml/{id}/acs` (HTTP-POST), AuthnRequests sent by HTTP-Redirect.

What an answer must be to sign anyone in (pysaml2 checks the first six, this module the rest):
a schema-valid Response whose Assertion is signed by a key of the identity provider's
metadata (never a key carried in the message), audience = our entity id, bearer
SubjectConfirmation recipient = our ACS, NotBefore/NotOnOrAfter windows (60 s skew),
InResponseTo = a request we sent (unless IdP-initiated sign-in is allowed); a Destination
naming our ACS, exactly one Assertion element in the whole document and no encrypted one (so
the element whose signature was checked is the only one read: the signature-wrapping family
has nowhere to hide a second one), an assertion id and NotOnOrAfter for the replay cache.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import functools
import logging
import shutil
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import saml2
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from defusedxml import ElementTree as SafeET
from saml2 import md, saml, xmldsig
from saml2.client import Saml2Client
from saml2.config import SPConfig
from saml2.metadata import create_metadata_string
from saml2.sigver import CryptoBackendXmlSec1
from saml2.time_util import str_to_time

log = logging.getLogger(__name__)

XMLSEC_BINARY = shutil.which("xmlsec1") or "/usr/bin/xmlsec1"
CLOCK_SKEW_SECONDS = 60
MAX_RESPONSE_BYTES = 256 * 1024  # a base64 SAMLResponse field, before decoding
ASSERTION = f"{{{saml.NAMESPACE}}}Assertion"
ENCRYPTED_ASSERTION = f"{{{saml.NAMESPACE}}}EncryptedAssertion"
RESPONSE = "{urn:oasis:names:tc:SAML:2.0:protocol}Response"


class SamlRefused(Exception):
    """The answer signs no one in; `reason` is for the log only."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class InvalidIdp(ValueError):
    """The identity provider's metadata or certificate is unusable (a validation error)."""


@dataclass(frozen=True)
class IdpDescription:
    """The identity provider of a connection, as the service provider needs it."""

    entity_id: str
    sso_url: str
    metadata_xml: str  # what pysaml2 loads (given, or built from the three parts)


@dataclass(frozen=True)
class Endpoints:
    entity_id: str
    acs_url: str


@dataclass(frozen=True)
class SamlIdentity:
    name_id: str
    assertion_id: str
    not_on_or_after: dt.datetime
    in_response_to: str | None
    attributes: dict[str, list[str]] = field(default_factory=dict)


def endpoints(public_base_url: str, connection_id: str) -> Endpoints:
    base = f"{public_base_url}/sso/saml/{connection_id}"
    return Endpoints(entity_id=f"{base}/metadata", acs_url=f"{base}/acs")


# -- the identity provider --------------------------------------------------------------------


def certificate_body(pem: str) -> str:
    """The base64 DER of a PEM certificate (as metadata carries it); InvalidIdp otherwise."""
    try:
        cert = x509.load_pem_x509_certificate(pem.strip().encode())
    except ValueError:
        raise InvalidIdp("idpCertificate is not a PEM certificate") from None
    return base64.b64encode(cert.public_bytes(Encoding.DER)).decode()


def idp_from_parts(entity_id: str, sso_url: str, certificate_pem: str) -> IdpDescription:
    """Metadata for an identity provider given as entity id, SSO URL and signing
    certificate, built with pysaml2's own metadata classes."""
    key_info = xmldsig.KeyInfo(
        x509_data=[
            xmldsig.X509Data(
                x509_certificate=xmldsig.X509Certificate(text=certificate_body(certificate_pem))
            )
        ]
    )
    descriptor = md.EntityDescriptor(
        entity_id=entity_id,
        idpsso_descriptor=md.IDPSSODescriptor(
            protocol_support_enumeration=saml2.samlp.NAMESPACE,
            want_authn_requests_signed="false",
            key_descriptor=[md.KeyDescriptor(use="signing", key_info=key_info)],
            single_sign_on_service=[
                md.SingleSignOnService(binding=saml2.BINDING_HTTP_REDIRECT, location=sso_url)
            ],
        ),
    )
    return IdpDescription(entity_id=entity_id, sso_url=sso_url, metadata_xml=str(descriptor))


def idp_from_metadata(metadata_xml: str) -> IdpDescription:
    """The identity provider an EntityDescriptor describes: exactly one IdP, an HTTP-Redirect
    SSO service and a signing certificate; InvalidIdp otherwise."""
    try:
        descriptor = md.entity_descriptor_from_string(metadata_xml)
    except Exception:  # pysaml2 raises several kinds for unreadable XML
        raise InvalidIdp("idpMetadataXml is not SAML metadata (an EntityDescriptor)") from None
    if descriptor is None or not descriptor.idpsso_descriptor:
        raise InvalidIdp("idpMetadataXml describes no identity provider (IDPSSODescriptor)")
    idp = descriptor.idpsso_descriptor[0]
    urls = [
        service.location
        for service in idp.single_sign_on_service
        if service.binding == saml2.BINDING_HTTP_REDIRECT
    ]
    if not urls:
        raise InvalidIdp("idpMetadataXml has no HTTP-Redirect SingleSignOnService")
    signing = [key for key in idp.key_descriptor if key.use in (None, "signing") and key.key_info]
    if not signing:
        raise InvalidIdp("idpMetadataXml has no signing certificate")
    return IdpDescription(
        entity_id=descriptor.entity_id, sso_url=urls[0], metadata_xml=metadata_xml
    )


# -- the service provider ---------------------------------------------------------------------


@functools.cache
def _xmlsec_version(binary: str) -> str:
    version: str = CryptoBackendXmlSec1(binary).version  # `xmlsec1 --version`, once
    return version


class _Xmlsec1(CryptoBackendXmlSec1):
    """pysaml2's own xmlsec1 backend, the binary's version read once per process: pysaml2
    asks `xmlsec1 --version` twice per signature check, two of its three child processes."""

    @property
    def version(self) -> str:
        return _xmlsec_version(self.xmlsec)


def _client(config: SPConfig) -> Saml2Client:
    client = Saml2Client(config=config)
    client.sec.crypto = _Xmlsec1(XMLSEC_BINARY)
    return client


_CONFIGS: OrderedDict[tuple[str, str, str, bool], SPConfig] = OrderedDict()
_CONFIGS_LOCK = threading.Lock()
_CONFIGS_KEPT = 64


def sp_config(ends: Endpoints, idp_metadata_xml: str, *, allow_idp_initiated: bool) -> SPConfig:
    """The pysaml2 configuration of one connection (kept while it is unchanged)."""
    key = (ends.entity_id, ends.acs_url, idp_metadata_xml, allow_idp_initiated)
    with _CONFIGS_LOCK:
        found = _CONFIGS.get(key)
        if found is not None:
            _CONFIGS.move_to_end(key)
            return found
    config = SPConfig()
    config.load(
        {
            "entityid": ends.entity_id,
            "xmlsec_binary": XMLSEC_BINARY,
            "accepted_time_diff": CLOCK_SKEW_SECONDS,
            "allow_unknown_attributes": True,
            "service": {
                "sp": {
                    "endpoints": {
                        "assertion_consumer_service": [(ends.acs_url, saml2.BINDING_HTTP_POST)]
                    },
                    "allow_unsolicited": allow_idp_initiated,
                    "authn_requests_signed": False,
                    "want_assertions_signed": True,
                    "want_response_signed": False,
                    "only_use_keys_in_metadata": True,
                    "name_id_format_allow_create": True,
                }
            },
            "metadata": {"inline": [idp_metadata_xml]},
        }
    )
    with _CONFIGS_LOCK:
        _CONFIGS[key] = config
        while len(_CONFIGS) > _CONFIGS_KEPT:
            _CONFIGS.popitem(last=False)
    return config


def check_metadata(ends: Endpoints, idp_metadata_xml: str) -> None:
    """Load the metadata the way a sign-in will (InvalidIdp when pysaml2 cannot)."""
    try:
        sp_config(ends, idp_metadata_xml, allow_idp_initiated=False)
    except Exception as exc:
        raise InvalidIdp(
            f"the identity provider's metadata does not load ({type(exc).__name__})"
        ) from None


def sp_metadata(config: SPConfig) -> str:
    """This service provider's metadata document (unsigned: it holds no secret)."""
    document = create_metadata_string(None, config=config, valid=None, sign=False)
    return document.decode() if isinstance(document, bytes) else str(document)


def authn_request(config: SPConfig, *, idp_entity_id: str, relay_state: str) -> tuple[str, str]:
    """An AuthnRequest for the identity provider: its id (stored; the answer's InResponseTo
    must name it) and the HTTP-Redirect location."""
    client = _client(config)
    request_id, info = client.prepare_for_authenticate(
        entityid=idp_entity_id, relay_state=relay_state, binding=saml2.BINDING_HTTP_REDIRECT
    )
    location = dict(info["headers"])["Location"]
    return str(request_id), location


def _decoded(saml_response: str) -> bytes:
    if len(saml_response) > MAX_RESPONSE_BYTES:
        raise SamlRefused("SAMLResponse too large")
    try:
        return base64.b64decode(saml_response, validate=False)
    except (binascii.Error, ValueError):
        raise SamlRefused("SAMLResponse is not base64") from None


def _shape(xml: bytes) -> tuple[str | None, int]:
    """InResponseTo of the Response (to find the request it answers) and how many
    assertions, plain or encrypted, the document holds anywhere. Read with defusedxml (no
    entities, no DTD); nothing read here signs anyone in."""
    try:
        root = SafeET.fromstring(xml)
    except Exception:
        raise SamlRefused("SAMLResponse is not well-formed XML") from None
    if root.tag != RESPONSE:
        raise SamlRefused("SAMLResponse is not a samlp:Response")
    count = sum(1 for _ in root.iter(ASSERTION)) + sum(1 for _ in root.iter(ENCRYPTED_ASSERTION))
    return root.get("InResponseTo"), count


def in_response_to(saml_response: str) -> str | None:
    """The request id an answer says it answers (looked up before verification)."""
    return _shape(_decoded(saml_response))[0]


def read_response(
    config: SPConfig, saml_response: str, *, outstanding: dict[str, str]
) -> SamlIdentity:
    """Verify an answer posted to the ACS; the identity of its one signed assertion."""
    xml = _decoded(saml_response)
    _, assertions = _shape(xml)
    if assertions != 1:
        raise SamlRefused(f"the document holds {assertions} assertions, not one")
    client = _client(config)
    try:
        response = client.parse_authn_request_response(
            saml_response, saml2.BINDING_HTTP_POST, outstanding=outstanding
        )
    except Exception as exc:  # pysaml2 refuses with many exception kinds
        raise SamlRefused(f"{type(exc).__name__}: {str(exc)[:200]}") from None
    if response is None or response.assertion is None:
        raise SamlRefused("no verified assertion")
    ends = config.getattr("endpoints", "sp")["assertion_consumer_service"]
    acs_url = ends[0][0]
    if response.response.destination != acs_url:
        raise SamlRefused("Destination does not name this ACS")
    if response.response.encrypted_assertion:
        raise SamlRefused("encrypted assertions are not accepted")
    assertion = response.assertion
    if not assertion.signature:
        raise SamlRefused("assertion not signed")
    _refuse_weak(assertion.signature)
    return SamlIdentity(
        name_id=(response.name_id.text or "").strip() if response.name_id else "",
        assertion_id=str(assertion.id),
        not_on_or_after=_not_on_or_after(assertion),
        in_response_to=response.in_response_to,
        attributes=_attributes(response.ava or {}),
    )


# SHA-1 (and MD5) signatures and digests are refused: Okta, Entra ID and Google sign with
# SHA-256 by default.
WEAK_ALGORITHMS = frozenset(
    {
        xmldsig.SIG_RSA_SHA1,
        xmldsig.SIG_DSA_SHA1,
        xmldsig.SIG_ECDSA_SHA1,
        xmldsig.DIGEST_SHA1,
        "http://www.w3.org/2001/04/xmldsig-more#rsa-md5",
        "http://www.w3.org/2001/04/xmldsig-more#md5",
    }
)


def _refuse_weak(signature: Any) -> None:
    """The checked signature's own algorithms (its SignedInfo) must not be SHA-1 or MD5."""
    info = signature.signed_info
    used = [info.signature_method.algorithm]
    used += [reference.digest_method.algorithm for reference in info.reference]
    weak = [algorithm for algorithm in used if algorithm in WEAK_ALGORITHMS]
    if weak:
        raise SamlRefused(f"weak signature algorithm {weak[0]}")


def _not_on_or_after(assertion: Any) -> dt.datetime:
    """The latest instant the assertion may be used (its Conditions, else its bearer
    confirmation): the replay cache keeps its id until then."""
    candidates = []
    if assertion.conditions is not None and assertion.conditions.not_on_or_after:
        candidates.append(assertion.conditions.not_on_or_after)
    for confirmation in assertion.subject.subject_confirmation:
        data = confirmation.subject_confirmation_data
        if data is not None and data.not_on_or_after:
            candidates.append(data.not_on_or_after)
    if not candidates:
        raise SamlRefused("assertion has no NotOnOrAfter")
    latest = max(_instant(value) for value in candidates)
    return latest + dt.timedelta(seconds=CLOCK_SKEW_SECONDS)


def _instant(value: str) -> dt.datetime:
    year, month, day, hour, minute, second = str_to_time(value)[:6]
    return dt.datetime(year, month, day, hour, minute, second, tzinfo=dt.UTC)


def _attributes(ava: dict[str, Any]) -> dict[str, list[str]]:
    return {
        str(name): [str(v) for v in (values if isinstance(values, list) else [values])]
        for name, values in ava.items()
    }
