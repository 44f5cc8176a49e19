"""The statements of the LISTEN connection: (UN)LISTEN commands and the liveness round trip."""

from __future__ import annotations

from collections.abc import Iterable

MAX_CHANNEL_BYTES = 63  # PostgreSQL's identifier length (NAMEDATALEN - 1)

PING = "SELECT 1"
NOTIFY = "SELECT pg_notify(%s, %s)"


def quote_channel(name: str) -> str:
    if len(name.encode()) > MAX_CHANNEL_BYTES:
        raise ValueError(f"channel name longer than {MAX_CHANNEL_BYTES} bytes: {name!r}")
    return '"' + name.replace('"', '""') + '"'


def listen_statement(listen: Iterable[str], unlisten: Iterable[str] = ()) -> str:
    """One multi-statement command: LISTEN each of `listen`, UNLISTEN each of `unlisten`."""
    return "; ".join(
        [f"LISTEN {quote_channel(c)}" for c in listen]
        + [f"UNLISTEN {quote_channel(c)}" for c in unlisten]
    )
