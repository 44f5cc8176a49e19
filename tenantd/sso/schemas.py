"""Bodies and answers of the SSO connection routes (camelCase JSON)."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from tenantd.web.schemas import ApiModel, Multiline, RequestBody

# A role key of the account other than owner (system or custom; checked against the account)
Role = Annotated[str, StringConstraints(pattern=r"^[a-z0-9_.:-]{1,64}$")]
Domain = Annotated[str, StringConstraints(strip_whitespace=True, min_length=3, max_length=253)]
Short = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=2048)]
Name = Annotated[str, StringConstraints(strip_whitespace=True, max_length=200)]
Attribute = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=256)]
MAX_METADATA = 200_000  # characters of idpMetadataXml (a large IdP's document, several certs)
MAX_DOMAINS = 50
MetadataXml = Annotated[str | None, Multiline(), Field(max_length=MAX_METADATA)]
CertificatePem = Annotated[str | None, Multiline(), Field(max_length=20_000)]


class AttributeMapping(RequestBody):
    """Which assertion attribute (SAML) or ID token claim (OIDC) holds each field; unset: the
    usual names (SAML: the NameID, then `email`, `mail`, the Entra ID claim URIs; OIDC:
    `email`, `given_name`, `family_name`, `groups`)."""

    email: Attribute | None = None
    first_name: Attribute | None = None
    last_name: Attribute | None = None
    groups: Attribute | None = None


_SAML_EXAMPLE = {
    "type": "saml",
    "domains": ["acme.com"],
    "idpEntityId": "http://www.okta.com/exk1abcd",
    "idpSsoUrl": "https://acme.okta.com/app/acme_tenantd/exk1abcd/sso/saml",
    "idpCertificate": "-----BEGIN CERTIFICATE-----\nMIID...\n-----END CERTIFICATE-----",
    "defaultRole": "member",
}


class ProviderFields(RequestBody):
    """The identity provider of a connection, the same fields in a new one and in a change:
    SAML, its metadata or the three parts; OIDC, the issuer and the client."""

    idp_metadata_xml: MetadataXml = None
    idp_entity_id: Short | None = None
    idp_sso_url: Short | None = None
    idp_certificate: CertificatePem = None
    issuer: Short | None = None
    client_id: Short | None = None
    client_secret: Short | None = None


class ConnectionCreate(ProviderFields, json_schema_extra={"examples": [_SAML_EXAMPLE]}):
    type: Literal["saml", "oidc"]
    domains: list[Domain] = Field(min_length=1, max_length=MAX_DOMAINS)
    name: Name = ""
    enforce: bool = False
    default_role: Role = "member"
    attribute_mapping: AttributeMapping = Field(default_factory=AttributeMapping)
    group_roles: dict[Attribute, Role] = Field(
        default_factory=dict, description="Group name -> role given at just-in-time membership"
    )
    allow_idp_initiated: bool = Field(False, description="SAML: accept unsolicited answers")


class ConnectionChange(ProviderFields, json_schema_extra={"examples": [{"enforce": True}]}):
    """Only the fields given change; a SAML provider is replaced as a whole (metadata, or the
    three parts), an OIDC secret only when `clientSecret` is given."""

    domains: list[Domain] | None = Field(None, min_length=1, max_length=MAX_DOMAINS)
    name: Name | None = None
    enforce: bool | None = None
    default_role: Role | None = None
    attribute_mapping: AttributeMapping | None = None
    group_roles: dict[Attribute, Role] | None = None
    allow_idp_initiated: bool | None = None


class ConnectionOut(ApiModel):
    id: uuid.UUID
    account_id: uuid.UUID
    type: str
    name: str
    domains: list[str]
    enforce: bool
    default_role: str
    attribute_mapping: dict[str, str]
    group_roles: dict[str, str]
    allow_idp_initiated: bool
    start_url: str = Field(description="Where a browser starts signing in through it")
    # SAML: the identity provider, and what to give it about tenantd (the service provider)
    idp_entity_id: str | None = None
    idp_sso_url: str | None = None
    sp_entity_id: str | None = None
    acs_url: str | None = None
    metadata_url: str | None = None
    # OpenID Connect (the client secret is never answered)
    issuer: str | None = None
    client_id: str | None = None
    redirect_uri: str | None = None
    created_at: dt.datetime
    updated_at: dt.datetime
