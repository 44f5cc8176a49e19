"""The API key a server route was called with (issue 15), as the API-key guard resolved it."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from aiohttp import web


@dataclass(frozen=True, slots=True)
class ActingKey:
    """The API key that authorized a server route (`Access.API_KEY`)."""

    id: uuid.UUID
    name: str
    scopes: frozenset[str]

    @property
    def actor(self) -> dict[str, str]:
        """How audit rows and events name this caller."""
        return {"type": "api_key", "id": str(self.id)}


def acting_key(request: web.Request) -> ActingKey:
    """The key of a server route's request (the API-key guard always sets it there)."""
    return request[ACTING_KEY]


ACTING_KEY: web.RequestKey[ActingKey] = web.RequestKey("acting_key")
