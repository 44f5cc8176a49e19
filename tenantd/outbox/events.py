"""Application events: `emit` writes one in the caller's transaction (the outbox)."""

from __future__ import annotations

import datetime as dt
import getpass
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from tenantd.db import Conn, Row
from tenantd.outbox import queries

ACTOR_TYPES = ("user", "operator", "system", "api_key")


@dataclass(frozen=True, slots=True)
class Actor:
    """Who caused a change: `{type: user|operator|system|api_key, id}`."""

    type: str
    id: str | None

    def __post_init__(self) -> None:
        if self.type not in ACTOR_TYPES:
            raise ValueError(f"actor type must be one of {ACTOR_TYPES}, got {self.type!r}")

    @classmethod
    def user(cls, user_id: uuid.UUID | str) -> Actor:
        return cls("user", str(user_id))

    @classmethod
    def api_key(cls, key_id: uuid.UUID | str) -> Actor:
        return cls("api_key", str(key_id))

    @classmethod
    def system(cls, component: str) -> Actor:
        return cls("system", component)

    @classmethod
    def operator(cls, name: str | None = None) -> Actor:
        """A person at the CLI: the OS account running it unless named."""
        if name is None:
            try:
                name = getpass.getuser()
            except (KeyError, OSError):
                name = "unknown"
        return cls("operator", name)

    def as_json(self) -> dict[str, str | None]:
        return {"type": self.type, "id": self.id}


@dataclass(frozen=True, slots=True)
class Event:
    """An event to write (emit_many)."""

    type: str
    account_id: uuid.UUID | None
    actor: Actor
    data: Mapping[str, Any]
    previous: Mapping[str, Any] | None = None
    subject: str | None = None


def new_event_id() -> str:
    return "evt_" + uuid.uuid4().hex


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _plain(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {_camel(str(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def payload(row: Mapping[str, Any], fields: Sequence[str] | None = None) -> dict[str, Any]:
    """A row as an event's object: camelCase keys, ids and times as strings."""
    picked = row if fields is None else {name: row[name] for name in fields}
    result: dict[str, Any] = _plain(picked)
    return result


def subject_of(type_: str, data: Mapping[str, Any]) -> str:
    """The object an event is about: its noun and the id of `data` ("user:<id>")."""
    noun = type_.split(".", 1)[0]
    key = data.get("id") or data.get("userId") or data.get("email") or ""
    return f"{noun}:{key}"


def _params(event: Event, event_id: str) -> dict[str, Any]:
    data = _plain(event.data)
    return {
        "event_id": event_id,
        "type": event.type,
        "account_id": event.account_id,
        "subject": event.subject or subject_of(event.type, data),
        "actor_type": event.actor.type,
        "actor_id": event.actor.id,
        "data": orjson.dumps(data).decode(),
        "previous": None
        if event.previous is None
        else orjson.dumps(_plain(event.previous)).decode(),
    }


async def emit(
    conn: Conn,
    type: str,
    *,
    account_id: uuid.UUID | None,
    actor: Actor,
    data: Mapping[str, Any],
    previous: Mapping[str, Any] | None = None,
    subject: str | None = None,
) -> str:
    """Write one event in the caller's transaction and return its id (`evt_...`).

    It becomes visible to readers only if that transaction commits.
    """
    event_id = new_event_id()
    event = Event(type, account_id, actor, data, previous, subject)
    async with conn.transaction():
        await conn.execute(queries.INSERT_EVENT, _params(event, event_id))
    return event_id


async def emit_many(conn: Conn, events: Sequence[Event]) -> list[str]:
    """Write many events in one statement (sweeps), in the caller's transaction."""
    if not events:
        return []
    ids = [new_event_id() for _ in events]
    rows = [_params(event, event_id) for event, event_id in zip(events, ids, strict=True)]
    columns = ("event_id", "type", "account_id", "subject", "actor_type", "actor_id")
    params: dict[str, Any] = {f"{name}s": [row[name] for row in rows] for name in columns}
    params["data"] = [row["data"] for row in rows]
    params["previous"] = [row["previous"] for row in rows]
    async with conn.transaction():
        await conn.execute(queries.INSERT_EVENTS, params)
    return ids


def public_event(row: Row) -> dict[str, Any]:
    """The wire form of a stored event: {id, type, occurredAt, accountId?, actor, data,
    previous?} (webhook bodies and the events API)."""
    body: dict[str, Any] = {
        "id": row["event_id"],
        "type": row["type"],
        "occurredAt": row["occurred_at"].astimezone(dt.UTC).isoformat().replace("+00:00", "Z"),
    }
    if row["account_id"] is not None:
        body["accountId"] = str(row["account_id"])
    body["actor"] = {"type": row["actor_type"], "id": row["actor_id"]}
    body["data"] = row["data"]
    if row["previous"] is not None:
        body["previous"] = row["previous"]
    return body
