"""Run SQLAlchemy Core statements (compiled for psycopg2) on aiopg connections.

aiopg connections are always in autocommit mode; `Database.transaction()` wraps a
block in BEGIN/COMMIT (ROLLBACK on any exception). The caller owns the transaction;
queries take the `Conn` they are given.
"""

from __future__ import annotations

import contextlib
import re
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, TypeAlias

import aiopg
import psycopg2.extensions
import psycopg2.extras
from aiohttp import web
from sqlalchemy.dialects.postgresql import psycopg2 as pg_dialect
from sqlalchemy.sql import ClauseElement

Row: TypeAlias = dict[str, Any]
NoticeSink: TypeAlias = Callable[[list[str]], None]
Statement: TypeAlias = "ClauseElement | str | Prepared"

_DIALECT = pg_dialect.dialect()
_COMPILE_ARGS = {"render_postcompile": True}

# UUIDs both ways, dicts as jsonb. Lists stay PostgreSQL arrays (wrap them in Json() for jsonb).
psycopg2.extras.register_uuid()
psycopg2.extensions.register_adapter(dict, psycopg2.extras.Json)


_NAMED = re.compile(r"%\((\w+)\)s")


class Prepared:
    """A hot query run as a server-side prepared statement (PREPARE once per connection,
    then EXECUTE): PostgreSQL skips parsing and planning, which dominates small queries.

    Write it with %(name)s params like any raw query; give parameters explicit casts where
    their type is not evident from context (e.g. in a SELECT list).
    """

    def __init__(self, name: str, sql: str):
        self.name = name
        self.sql = sql
        order: list[str] = []
        for match in _NAMED.finditer(sql):
            if match.group(1) not in order:
                order.append(match.group(1))
        self.param_names = order
        self.prepare_sql = f"PREPARE {name} AS " + _NAMED.sub(
            lambda m: f"${order.index(m.group(1)) + 1}", sql
        )
        arguments = ", ".join(f"%({n})s" for n in order)
        self.execute_sql = f"EXECUTE {name}({arguments})" if order else f"EXECUTE {name}"


def compile_statement(stmt: Statement, params: Mapping[str, Any] | None) -> tuple[str, Any]:
    """Return (sql, params) for psycopg2. Raw strings use %(name)s placeholders."""
    if isinstance(stmt, Prepared):
        return stmt.execute_sql, dict(params or {})
    if isinstance(stmt, str):
        # No params means no %-formatting, so literal % signs in raw SQL stay safe.
        return stmt, (dict(params) if params else None)
    compiled = stmt.compile(dialect=_DIALECT, compile_kwargs=_COMPILE_ARGS)
    values = dict(compiled.params)
    if params:
        values.update(params)
    return str(compiled), values


# Names prepared on each pooled connection (prepared statements live as long as the session).
_PREPARED: weakref.WeakKeyDictionary[aiopg.Connection, set[str]] = weakref.WeakKeyDictionary()


class Conn:
    """One pooled connection; every query helper compiles, executes and maps rows."""

    def __init__(self, raw: aiopg.Connection, notice_sink: NoticeSink | None = None):
        self.raw = raw
        self.in_transaction = False
        self.notice_sink = notice_sink

    async def _ensure_prepared(self, stmt: Statement) -> None:
        if not isinstance(stmt, Prepared):
            return
        names = _PREPARED.setdefault(self.raw, set())
        if stmt.name in names:
            return
        async with self.raw.cursor() as cur:
            await cur.execute(stmt.prepare_sql)
        names.add(stmt.name)

    def _settled(self) -> None:
        """Hand server notices (cache invalidations from triggers) over once they are durable."""
        notices = self.raw.notices
        if notices and not self.in_transaction:
            pending = list(notices)
            del notices[:]
            if self.notice_sink is not None:
                self.notice_sink(pending)

    async def execute(self, stmt: Statement, params: Mapping[str, Any] | None = None) -> int:
        """Run a statement; return the affected row count."""
        await self._ensure_prepared(stmt)
        sql, values = compile_statement(stmt, params)
        async with self.raw.cursor() as cur:
            await cur.execute(sql, values)
            count = int(cur.rowcount)
        self._settled()
        return count

    async def fetch_all(
        self, stmt: Statement, params: Mapping[str, Any] | None = None
    ) -> list[Row]:
        await self._ensure_prepared(stmt)
        sql, values = compile_statement(stmt, params)
        async with self.raw.cursor() as cur:
            await cur.execute(sql, values)
            raw_rows = await cur.fetchall()
            names = [column.name for column in cur.description or ()]
        self._settled()
        # dict(zip()) is built in C; psycopg2's RealDictCursor sets each column in Python.
        return [dict(zip(names, row, strict=True)) for row in raw_rows]

    async def fetch_one(
        self, stmt: Statement, params: Mapping[str, Any] | None = None
    ) -> Row | None:
        await self._ensure_prepared(stmt)
        sql, values = compile_statement(stmt, params)
        async with self.raw.cursor() as cur:
            await cur.execute(sql, values)
            raw_row = await cur.fetchone()
            names = [column.name for column in cur.description or ()]
        self._settled()
        return None if raw_row is None else dict(zip(names, raw_row, strict=True))

    async def fetch_val(self, stmt: Statement, params: Mapping[str, Any] | None = None) -> Any:
        await self._ensure_prepared(stmt)
        sql, values = compile_statement(stmt, params)
        async with self.raw.cursor() as cur:
            await cur.execute(sql, values)
            row = await cur.fetchone()
        self._settled()
        return None if row is None else row[0]

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Conn]:
        """BEGIN/COMMIT on this connection; nested calls join the outer transaction."""
        if self.in_transaction:
            yield self
            return
        async with self.raw.cursor() as cur:
            await cur.execute("BEGIN")
        self.in_transaction = True
        try:
            yield self
        except BaseException:
            self.in_transaction = False
            if not self.raw.closed:
                async with self.raw.cursor() as cur:
                    await cur.execute("ROLLBACK")
                del self.raw.notices[:]  # nothing changed
            raise
        self.in_transaction = False
        async with self.raw.cursor() as cur:
            await cur.execute("COMMIT")
        self._settled()


class Database:
    """The pool, with connection() and transaction() blocks."""

    def __init__(self, pool: aiopg.Pool):
        self.pool = pool
        # Receives trigger notices after commit (the request-context cache invalidates on them).
        self.notice_sink: NoticeSink | None = None

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Conn]:
        async with self.pool.acquire() as raw:
            yield Conn(raw, self.notice_sink)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Conn]:
        async with self.pool.acquire() as raw:
            conn = Conn(raw, self.notice_sink)
            async with conn.transaction():
                yield conn

    async def fetch_one(
        self, stmt: Statement, params: Mapping[str, Any] | None = None
    ) -> Row | None:
        async with self.connection() as conn:
            return await conn.fetch_one(stmt, params)

    async def fetch_all(
        self, stmt: Statement, params: Mapping[str, Any] | None = None
    ) -> list[Row]:
        async with self.connection() as conn:
            return await conn.fetch_all(stmt, params)

    async def fetch_val(self, stmt: Statement, params: Mapping[str, Any] | None = None) -> Any:
        async with self.connection() as conn:
            return await conn.fetch_val(stmt, params)

    async def execute(self, stmt: Statement, params: Mapping[str, Any] | None = None) -> int:
        async with self.connection() as conn:
            return await conn.execute(stmt, params)

    async def close(self) -> None:
        self.pool.close()
        await self.pool.wait_closed()


async def create_database(dsn: str, *, minsize: int = 1, maxsize: int = 10) -> Database:
    # aiopg would otherwise adapt every dict as hstore; we want dicts as jsonb.
    pool = await aiopg.create_pool(
        dsn, minsize=minsize, maxsize=maxsize, timeout=30.0, enable_hstore=False
    )
    return Database(pool)


def new_id() -> uuid.UUID:
    return uuid.uuid4()


# The application's pool, for the kernel's own routes and hooks (probes, rate limits).
DATABASE = web.AppKey("database", Database)
