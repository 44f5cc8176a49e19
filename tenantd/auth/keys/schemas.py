"""Bodies and answers of the JWKS and introspection routes."""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import Field

from tenantd.web.schemas import ApiModel, RequestBody

_TOKEN_EXAMPLE = "eyJhbGciOiJFZERTQSIsImtpZCI6IjIwMjYxMTI0LWFiYyJ9.e30.c2ln"


class IntrospectBody(RequestBody, json_schema_extra={"examples": [{"token": _TOKEN_EXAMPLE}]}):
    token: str = Field(min_length=1, max_length=4096, description="An access token (auth_token)")


class Introspection(ApiModel):
    """RFC 7662 style: only `active` when the token does not hold."""

    active: bool
    sub: uuid.UUID | None = Field(default=None, description="The user")
    aid: uuid.UUID | None = Field(default=None, description="The active account (may be null)")
    sid: uuid.UUID | None = Field(default=None, description="The session family")
    exp: int | None = Field(default=None, description="Expiry, seconds since the epoch")


class Jwks(ApiModel):
    keys: list[dict[str, Any]] = Field(description="Public JWKs (kid, alg, use, kty, crv, x[, y])")
