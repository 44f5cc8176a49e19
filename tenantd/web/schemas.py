"""Base pydantic models: camelCase JSON, strict request bodies, shared envelopes."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    """Response models: snake_case in Python, camelCase in JSON."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class RequestBody(ApiModel):
    """Request bodies refuse unknown fields so typos fail loudly."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", str_max_length=10_000
    )


class Message(ApiModel):
    message: str


class Empty(ApiModel):
    pass


class ErrorDetail(ApiModel):
    code: str
    message: str
    details: dict[str, Any] | None = None


class ErrorEnvelope(ApiModel):
    success: bool = False
    error: ErrorDetail
