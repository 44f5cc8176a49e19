"""Run SQLAlchemy Core statements (compiled for psycopg2) on aiopg connections.

aiopg connections are always in autocommit mode; `Database.transaction()` wraps a
block in BEGIN/COMMIT (ROLLBACK on any exception). The caller owns the transaction;
queries take the `Conn` they are given.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import re
import uuid
import weakref
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Any, TypeAlias, TypeVar

import aiopg
import psycopg2.extensions
import psycopg2.extras
from aiohttp import web
from sqlalchemy.dialects.postgresql import psycopg2 as pg_dialect
from sqlalchemy.sql import ClauseElement

from tenantd.db.errors import DatabaseUnavailable
from tenantd.db.marks import WriteMarks

Row: TypeAlias = dict[str, Any]
NoticeSink: TypeAlias = Callable[[list[str]], None]
# Told that committed writes announced something (rows of `announcements`): wakes the
# process's relay (tenantd/db/relay.py); must not block or raise.
AnnouncedHook: TypeAlias = Callable[[], None]
Statement: TypeAlias = "ClauseElement | str | Prepared"
T = TypeVar("T")

log = logging.getLogger(__name__)

_DIALECT = pg_dialect.dialect()
_COMPILE_ARGS = {"render_postcompile": True}

# UUIDs both ways, dicts as jsonb. Lists stay PostgreSQL arrays (wrap them in Json() for jsonb).
psycopg2.extras.register_uuid()
psycopg2.extensions.register_adapter(dict, psycopg2.extras.Json)


_NAMED = re.compile(r"%\((\w+)\)s")

# The pool's health (PoolHealth below): a statement unanswered for STALL_SECONDS, or a
# connection that fails, makes the pool ask the database on a connection of its own; while
# that probe fails (PROBE_TIMEOUT_SECONDS each, PROBE_INTERVAL_SECONDS apart) the pool is down.
STALL_SECONDS = 3.0
PROBE_TIMEOUT_SECONDS = 2.0
PROBE_INTERVAL_SECONDS = 0.5

# Errors of a read on a replica that the primary answers instead: the replica is gone (it is
# then probed like a pool's database), its statement ran out of time, or hot-standby replay
# cancelled it (40001, 40P01: conflict with recovery).
_REPLICA_RETRY_CODES = ("40001", "40P01")


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


class _Session:
    """What tenantd keeps on one aiopg connection: a psycopg2 cursor reused by every
    statement (aiopg builds a Cursor, a Transaction and two coroutines per `cursor()`), and the
    names prepared on it (prepared statements live as long as the session)."""

    __slots__ = ("bound", "cursor", "health", "prepared", "watchdog")

    def __init__(self, raw: aiopg.Connection):
        self.cursor = raw.raw.cursor()
        self.prepared: set[str] = set()
        self.watchdog = _watchdog(raw._loop)
        self.bound: float = raw.timeout  # the pool's per-operation bound (30 s)
        self.health: PoolHealth | None = None  # the pool's, for a pooled connection


def _session(raw: aiopg.Connection) -> _Session:
    session: _Session | None = raw.__dict__.get("_tenantd_session")
    if session is None:
        session = _Session(raw)
        raw.__dict__["_tenantd_session"] = session
    return session


class _Watchdog:
    """The bounds on waiting for the database, one timer for every wait of an event loop.

    aiopg bounds each operation with `asyncio.wait_for` (a future, a timer and callbacks per
    statement). Here a wait only records its deadline; one timer, armed for the earliest
    deadline, ends what outlived its bound with TimeoutError, as aiopg's timeout did: a
    statement's connection is closed, a caller queued for a pooled connection gives up. The
    server-side statement_timeout, where set, ends slow statements first; this catches a
    connection that stopped answering.

    The same timer looks at the running statements every STALL_SECONDS: a pooled connection's
    statement unanswered that long makes its pool probe the database (PoolHealth), and while
    the pool knows the database is down such a statement is ended at once.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop):
        # Weak, as the timer below: the registry of watchdogs is keyed weakly by loop, and a
        # strong reference from here would keep every loop (one per test) alive.
        self.loop = weakref.ref(loop)
        # deadline of each running statement (its connection) and queued checkout (its future)
        self.running: dict[aiopg.Connection | asyncio.Future[Any], float] = {}
        self.timer: weakref.ref[asyncio.TimerHandle] | None = None  # weak: a handle holds its loop
        self.armed_for = math.inf

    def start(self, key: aiopg.Connection | asyncio.Future[Any], bound: float) -> None:
        loop = self.loop()
        assert loop is not None  # it runs this call
        deadline = loop.time() + bound
        self.running[key] = deadline
        if deadline < self.armed_for:
            # Rarely taken: while statements run, `check` keeps the timer within STALL_SECONDS.
            wake = deadline - bound + STALL_SECONDS if bound > STALL_SECONDS else deadline
            timer = self.timer() if self.timer is not None else None
            if timer is not None:
                timer.cancel()
            self.armed_for = wake
            self.timer = weakref.ref(loop.call_at(wake, self.check))

    def check(self) -> None:
        self.timer, self.armed_for = None, math.inf
        loop = self.loop()
        if loop is None:
            return
        now = loop.time()
        earliest = math.inf
        for key, deadline in list(self.running.items()):
            if deadline > now:
                if not isinstance(key, asyncio.Future):
                    earliest = min(earliest, self._stalled(key, deadline, now))
                earliest = min(earliest, deadline)
                continue
            del self.running[key]
            if isinstance(key, asyncio.Future):
                if not key.done():
                    key.set_exception(TimeoutError())
                continue
            log.warning("a statement outlived its bound; its connection is closed")
            _end_statement(key, TimeoutError())
        if earliest != math.inf:
            self.armed_for = earliest
            self.timer = weakref.ref(loop.call_at(earliest, self.check))

    def _stalled(self, conn: aiopg.Connection, deadline: float, now: float) -> float:
        """A running statement not yet out of its bound: when it has waited STALL_SECONDS,
        its pool probes the database, or (the pool knows it is down) it ends now. When to
        look at it again."""
        session: _Session | None = conn.__dict__.get("_tenantd_session")
        if session is None or session.health is None or session.bound == math.inf:
            return deadline
        started = deadline - session.bound
        if now - started < STALL_SECONDS:
            return started + STALL_SECONDS
        if session.health.pool.down:
            del self.running[conn]
            _end_statement(conn, DatabaseUnavailable())
            return math.inf
        session.health.suspect(f"a statement unanswered for {now - started:.0f} s")
        return now + STALL_SECONDS


def _end_statement(conn: aiopg.Connection, error: BaseException) -> None:
    """End the statement running on `conn` with `error` and close the connection."""
    waiter = conn._waiter
    if waiter is not None and not waiter.done():
        waiter.set_exception(error)
    conn.close()


_WATCHDOGS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Watchdog] = (
    weakref.WeakKeyDictionary()
)


def _watchdog(loop: asyncio.AbstractEventLoop) -> _Watchdog:
    watchdog = _WATCHDOGS.get(loop)
    if watchdog is None:
        watchdog = _WATCHDOGS[loop] = _Watchdog(loop)
    return watchdog


async def run_statement(raw: aiopg.Connection, sql: str, values: Any = None) -> Any:
    """Run one statement on an aiopg connection; return the psycopg2 cursor holding its result
    (read it before the next statement on this connection).

    What aiopg's `Cursor.execute` does, without a Cursor object or `wait_for` per statement:
    the same waiter and `_ready` poll callback of the connection (aiopg 1.4, pinned by
    tests/db/test_roundtrip.py), errors raised as psycopg2 raises them, a server-side cancel
    turned into CancelledError as aiopg does, and a statement cancelled mid-flight closes the
    connection (a pool never gets back a connection with a statement running on it).
    """
    session = _session(raw)
    cursor = session.cursor
    waiter = raw._create_waiter("execute")  # RuntimeError if a statement is already running
    try:
        cursor.execute(sql, values)
    except BaseException:
        raw._waiter = None
        raise
    watchdog = session.watchdog
    watchdog.start(raw, session.bound)
    try:
        raw._ready(raw._weakref)  # sends what the first write left, as aiopg's _poll does
        await waiter
    except asyncio.CancelledError:
        if not waiter.done() or waiter.cancelled():
            raw.close()
        raise
    except psycopg2.extensions.QueryCanceledError as exc:
        raw._loop.call_exception_handler(
            {"message": exc.pgerror, "exception": exc, "future": waiter}
        )
        raise asyncio.CancelledError from exc
    finally:
        raw._waiter = None
        watchdog.running.pop(raw, None)
    return cursor


class Conn:
    """One pooled connection; every query helper compiles, executes and maps rows."""

    def __init__(
        self,
        raw: aiopg.Connection,
        notice_sink: NoticeSink | None = None,
        on_announced: AnnouncedHook | None = None,
    ):
        self.raw = raw
        self.in_transaction = False
        self.notice_sink = notice_sink
        self.on_announced = on_announced
        self._after_commit: list[Callable[[], None]] | None = None

    async def _run(self, stmt: Statement, params: Mapping[str, Any] | None) -> Any:
        """Prepare (once per connection) and run; the psycopg2 cursor with the result."""
        raw = self.raw
        if isinstance(stmt, Prepared):
            session = _session(raw)
            if stmt.name not in session.prepared:
                await run_statement(raw, stmt.prepare_sql)
                session.prepared.add(stmt.name)
            values = params if type(params) is dict else dict(params or {})
            return await run_statement(raw, stmt.execute_sql, values)
        sql, values = compile_statement(stmt, params)
        return await run_statement(raw, sql, values)

    def _settled(self) -> None:
        """Hand server notices (cache invalidations from triggers) over once they are durable;
        they come with rows of `announcements`, so the relay is woken too."""
        notices = self.raw.notices
        if notices and not self.in_transaction:
            pending = list(notices)
            del notices[:]
            if self.notice_sink is not None:
                self.notice_sink(pending)
            if self.on_announced is not None:
                self.on_announced()

    async def execute(self, stmt: Statement, params: Mapping[str, Any] | None = None) -> int:
        """Run a statement; return the affected row count."""
        cursor = await self._run(stmt, params)
        count = int(cursor.rowcount)
        self._settled()
        return count

    async def fetch_all(
        self, stmt: Statement, params: Mapping[str, Any] | None = None
    ) -> list[Row]:
        cursor = await self._run(stmt, params)
        raw_rows = cursor.fetchall()
        names = [column.name for column in cursor.description or ()]
        self._settled()
        # dict(zip()) is built in C; psycopg2's RealDictCursor sets each column in Python.
        return [dict(zip(names, row, strict=True)) for row in raw_rows]

    async def fetch_one(
        self, stmt: Statement, params: Mapping[str, Any] | None = None
    ) -> Row | None:
        cursor = await self._run(stmt, params)
        raw_row = cursor.fetchone()
        names = None if raw_row is None else [column.name for column in cursor.description]
        self._settled()
        return None if names is None else dict(zip(names, raw_row, strict=True))

    async def fetch_val(self, stmt: Statement, params: Mapping[str, Any] | None = None) -> Any:
        cursor = await self._run(stmt, params)
        row = cursor.fetchone()
        self._settled()
        return None if row is None else row[0]

    def transaction(self) -> contextlib.AbstractAsyncContextManager[Conn]:
        """BEGIN/COMMIT on this connection (ROLLBACK on any exception); nested calls join
        the outer transaction."""
        return _Transaction(self)

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Call `callback` once what this connection wrote is committed: when its
        transaction commits, or at once outside a transaction (each statement commits on
        its own). A rollback forgets it."""
        if not self.in_transaction:
            callback()
        elif self._after_commit is None:
            self._after_commit = [callback]
        else:
            self._after_commit.append(callback)

    def announced(self) -> None:
        """This connection's SQL wrote announcements (rows of `announcements`, which no
        NOTICE reports): wake the process's relay once they are committed, so it publishes
        them at once rather than at its next sweep."""
        hook = self.on_announced
        if hook is not None:
            self.after_commit(hook)

    def _committed(self, committed: bool) -> None:
        callbacks, self._after_commit = self._after_commit, None
        if not committed or callbacks is None:
            return
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("an after-commit callback failed")


class _Transaction:
    """`Conn.transaction()`, without a generator."""

    __slots__ = ("conn", "outer")

    def __init__(self, conn: Conn):
        self.conn = conn
        self.outer = False

    async def __aenter__(self) -> Conn:
        conn = self.conn
        if not conn.in_transaction:
            await run_statement(conn.raw, "BEGIN")
            conn.in_transaction = self.outer = True
        return conn

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if not self.outer:
            return
        conn, self.outer = self.conn, False
        conn.in_transaction = False
        if exc_type is not None:
            conn._committed(False)
            if not conn.raw.closed:
                await run_statement(conn.raw, "ROLLBACK")
                del conn.raw.notices[:]  # nothing changed
            return
        try:
            await run_statement(conn.raw, "COMMIT")
        except BaseException:
            conn._committed(False)
            raise
        conn._settled()
        conn._committed(True)


class Pool(aiopg.Pool):
    """aiopg's pool, with a checkout and a return that cost no lock, timer or task.

    aiopg takes the pool's Condition under a timeout for every checkout, and every release
    starts a task to notify that Condition, which the releasing caller then waits for. Here
    a free connection is taken at once, a caller opens one when the pool is not full, and
    when it is full a caller queues a future that the next release fills with its
    connection (first come, first served, bounded by the pool's timeout as aiopg's wait is).
    No checkout waits on aiopg's Condition (two queues would starve one another); closing
    the pool and dropping a broken or mid-transaction connection stay aiopg's own code.

    While its health (PoolHealth) says the database is down, a checkout fails at once with
    DatabaseUnavailable instead of waiting for a connection that cannot come.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._queued: collections.deque[asyncio.Future[aiopg.Connection | None]] = (
            collections.deque()
        )
        self._watchdog = _watchdog(self._loop)
        self.down = False  # the database does not answer (PoolHealth keeps it)
        self.health = PoolHealth(self)
        self._connecting: set[asyncio.Future[aiopg.Connection]] = set()
        on_connect = self._on_connect

        async def adopt(conn: aiopg.Connection) -> None:
            _session(conn).health = self.health  # every connection of the pool, aiopg's too
            if on_connect is not None:
                await on_connect(conn)

        self._on_connect = adopt

    def take_nowait(self) -> aiopg.Connection | None:
        """A free connection, if one is free and no other caller waits for one."""
        free = self._free
        while free and not self._closing and not self._queued and not self.down:
            conn = free.pop()  # the most recently used: its backend is warm
            if conn.closed:
                continue
            self._used.add(conn)
            return conn
        return None

    async def _acquire(self) -> aiopg.Connection:
        while True:
            if self._closing:
                raise RuntimeError("Cannot acquire connection after closing pool")
            if self.down:
                raise DatabaseUnavailable()
            conn = self.take_nowait()
            if conn is not None:
                return conn
            if self._opened() < (self.maxsize or math.inf):
                conn = await self._open()
            else:
                conn = await self._queue()
            if conn is not None:
                return conn
            # None: the pool filled up meanwhile, or a connection was dropped instead of
            # handed over: look again

    def _opened(self) -> int:
        return len(self._free) + len(self._used) + self._acquiring

    async def _open(self) -> aiopg.Connection | None:
        """A new connection for this caller, opened as aiopg's pool opens them: one at a time
        under the pool's Condition lock, in turn (a burst of callers on a cold pool is served
        in the order aiopg serves it; None if the pool filled up while this one waited)."""
        async with asyncio.timeout(self._timeout), self._cond:
            if self.down:
                raise DatabaseUnavailable()
            conn = self.take_nowait()  # returned while this caller waited its turn
            if conn is not None or self._opened() >= (self.maxsize or math.inf):
                return conn
            self._acquiring += 1
            try:
                conn = await self._connect()
                try:
                    if self._on_connect is not None:
                        await self._on_connect(conn)
                except BaseException:
                    conn.close()
                    raise
            finally:
                self._acquiring -= 1
            self._used.add(conn)
            return conn

    async def _connect(self) -> aiopg.Connection:
        """A new connection; a connect unanswered for STALL_SECONDS makes the pool probe the
        database, and ends with DatabaseUnavailable when the pool finds it down."""

        async def connect() -> aiopg.Connection:
            return await aiopg.connect(
                self._dsn,
                timeout=self._timeout,
                enable_json=self._enable_json,
                enable_hstore=self._enable_hstore,
                enable_uuid=self._enable_uuid,
                echo=self._echo,
                **self._conn_kwargs,
            )

        task = asyncio.current_task()
        cancels = task.cancelling() if task is not None else 0
        attempt = self._loop.create_task(connect())
        self._connecting.add(attempt)
        stalled = self._loop.call_later(
            STALL_SECONDS, self.health.suspect, f"a connect unanswered for {STALL_SECONDS:.0f} s"
        )
        try:
            conn = await attempt
        except asyncio.CancelledError:
            if self.down and attempt.cancelled() and not (task and task.cancelling()):
                raise DatabaseUnavailable() from None  # ended by the pool going down
            raise
        finally:
            stalled.cancel()
            self._connecting.discard(attempt)
            if not attempt.done():
                attempt.cancel()
        if task is not None and task.cancelling() > cancels:
            # The caller was cancelled as one of the connect's steps finished, and aiopg waits
            # on each with asyncio.wait_for, which then (Python 3.11) returns the result and
            # drops the cancel: honour it, or the caller runs on as if never cancelled.
            conn.close()
            raise asyncio.CancelledError
        return conn

    def refuse_all(self) -> None:
        """The database is down: close the free connections and end every wait for one
        (queued checkouts, connects, running statements) with DatabaseUnavailable."""
        while self._free:
            self._free.pop().close()
        while self._queued:
            waiter = self._queued.popleft()
            if not waiter.done():
                waiter.set_exception(DatabaseUnavailable())
        for attempt in list(self._connecting):
            attempt.cancel()
        for conn in list(self._used):
            if conn._waiter is not None and not conn._waiter.done():
                self._watchdog.running.pop(conn, None)
                _end_statement(conn, DatabaseUnavailable())

    async def _queue(self) -> aiopg.Connection | None:
        """Wait for a connection handed over by a release (None: look again)."""
        waiter: asyncio.Future[aiopg.Connection | None] = self._loop.create_future()
        self._queued.append(waiter)
        self._watchdog.start(waiter, self._timeout)
        try:
            return await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                handed = waiter.result()  # handed over as this caller gave up: pass it on
                if handed is not None:
                    self.give_back(handed)
            else:
                with contextlib.suppress(ValueError):
                    self._queued.remove(waiter)
                if not waiter.done():
                    waiter.cancel()
            raise
        finally:
            self._watchdog.running.pop(waiter, None)

    def give_back(self, conn: aiopg.Connection) -> None:
        """`release()` for a caller that does not wait for the wake-up of other callers."""
        if not self._handed_over(conn):
            super().release(conn)

    def release(self, conn: aiopg.Connection) -> asyncio.Future[None]:
        if self._handed_over(conn):
            future: asyncio.Future[None] = self._loop.create_future()
            future.set_result(None)
            return future
        return super().release(conn)

    def _handed_over(self, conn: aiopg.Connection) -> bool:
        """Give a returned connection to the first queued caller or the free list; False
        when aiopg's release must handle it (closing, broken, mid-transaction, or callers
        waiting on aiopg's Condition)."""
        if conn not in self._used:
            return False
        if (
            self._closing
            or conn.closed
            or conn.raw.get_transaction_status() != psycopg2.extensions.TRANSACTION_STATUS_IDLE
        ):
            self._wake_queued(None)  # aiopg drops it: a queued caller opens one in its place
            return False
        if self._wake_queued(conn):
            return True
        if self._cond._waiters:
            return False
        self._used.remove(conn)
        self._free.append(conn)
        return True

    def _wake_queued(self, conn: aiopg.Connection | None) -> bool:
        while self._queued:
            waiter = self._queued.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return True
        return False

    def close(self) -> None:
        if self.health.pool is self:
            self.health.stop()
        else:  # a follower leaves the health it shares
            self.health.followers.remove(self)
        super().close()


def is_connection_error(error: BaseException) -> bool:
    """Whether `error` says the database (or the way to it) is gone, rather than that a
    statement failed: a connection refused, closed or lost, the server shutting down or
    still starting (SQLSTATE classes 08 and 57P), or the pool already knowing it is down."""
    if isinstance(error, DatabaseUnavailable | psycopg2.InterfaceError):
        return True
    if isinstance(error, psycopg2.OperationalError):
        code = error.pgcode
        return code is None or code.startswith(("08", "57P"))
    return False


class PoolHealth:
    """Whether a pool's database answers: a circuit set by connection errors and stalled
    statements, probed in the background, cleared when the database answers again.

    `suspect` (a connection error, a statement or connect unanswered for STALL_SECONDS)
    starts one probe task: a connection of its own and `SELECT 1`, bounded by
    PROBE_TIMEOUT_SECONDS. While probes fail the pool is down: every wait for the database
    ends with DatabaseUnavailable and checkouts fail at once (a 503 with Retry-After instead
    of a 30 s wait or a traceback); it probes every PROBE_INTERVAL_SECONDS and reopens when
    one succeeds. The happy path costs nothing: the pool reads one flag per checkout.
    """

    def __init__(self, pool: Pool):
        self.pool = pool
        self.probe: asyncio.Task[None] | None = None
        self.down_since: float | None = None
        self.probes = 0
        self.followers: list[Pool] = []  # other pools on the database, down and up with it

    def follow(self, pool: Pool) -> None:
        """`pool` (another pool on the same database) shares this health: one probe and one
        log line for both, and it goes down and up with this pool."""
        pool.health.stop()
        pool.health = self
        self.followers.append(pool)

    def _pools(self) -> list[Pool]:
        return [self.pool, *self.followers]

    def suspect(self, reason: str) -> None:
        """Something looked like the database is gone: ask it (once at a time)."""
        if self.probe is None and not self.pool._closing:
            self.probe = self.pool._loop.create_task(self._probe(reason))

    def stop(self) -> None:
        if self.probe is not None:
            self.probe.cancel()
            self.probe = None

    async def _probe(self, reason: str) -> None:
        pool = self.pool
        try:
            while not pool._closing:
                self.probes += 1
                failure = await self._answers()
                if failure is None:
                    if pool.down:
                        for each in self._pools():
                            each.down = False
                        took = pool._loop.time() - (self.down_since or pool._loop.time())
                        log.warning("database available again after %.1f s", took)
                    return
                if not pool.down:
                    self.down_since = pool._loop.time()
                    log.warning(
                        "database unavailable (%s; probe: %s); answering 503 until it answers",
                        reason,
                        failure,
                    )
                    for each in self._pools():
                        each.down = True
                        each.refuse_all()
                await asyncio.sleep(PROBE_INTERVAL_SECONDS)
        finally:
            if self.probe is asyncio.current_task():
                self.probe = None

    async def _answers(self) -> str | None:
        """None when the database answers a statement; else what went wrong."""
        pool = self.pool
        conn: aiopg.Connection | None = None
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_SECONDS):
                conn = await aiopg.connect(
                    pool._dsn, timeout=PROBE_TIMEOUT_SECONDS, enable_hstore=False
                )
                async with conn.cursor() as cursor:
                    await cursor.execute("SELECT 1")
        except TimeoutError:
            return f"no answer in {PROBE_TIMEOUT_SECONDS:.0f} s"
        except psycopg2.Error as error:
            if is_connection_error(error):
                return str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            return None  # the server answered (e.g. too many clients): it is up
        finally:
            if conn is not None:
                conn.close()
        return None


class _Checkout:
    """`Database.connection()`: a pooled connection for the block, without a generator."""

    __slots__ = ("cm", "db", "raw")

    def __init__(self, db: Database):
        self.db = db
        self.raw: aiopg.Connection | None = None
        self.cm: Any = None

    async def __aenter__(self) -> Conn:
        pool = self.db.pool
        if isinstance(pool, Pool):
            raw = pool.take_nowait()
            if raw is None:
                try:
                    raw = await pool.acquire()
                except Exception as error:
                    translated = _unavailable(pool, error)
                    if translated is error:
                        raise
                    raise translated from error
            self.raw = raw
        else:  # a plain aiopg pool
            self.cm = pool.acquire()
            self.raw = await self.cm.__aenter__()
        return Conn(self.raw, self.db.notice_sink, self.db.on_announced)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        raw, self.raw = self.raw, None
        pool = self.db.pool
        if self.cm is not None:
            await self.cm.__aexit__(exc_type, exc, tb)
        elif raw is not None and isinstance(pool, Pool):  # taken from our Pool (no cm)
            pool.give_back(raw)
        if exc is not None and isinstance(exc, Exception):
            translated = _unavailable(pool, exc)
            if translated is not exc:
                raise translated from exc


def _unavailable(pool: Any, error: Exception) -> Exception:
    """A connection error as DatabaseUnavailable (the pool then probes the database); any
    other error as it is."""
    if isinstance(error, DatabaseUnavailable) or not is_connection_error(error):
        return error
    health = getattr(pool, "health", None)
    if health is not None:
        first = str(error).strip().splitlines()
        health.suspect(first[0] if first else type(error).__name__)
    return DatabaseUnavailable()


class _CheckoutTransaction:
    """`Database.transaction()`: a pooled connection and a transaction on it."""

    __slots__ = ("checkout", "transaction")

    def __init__(self, db: Database):
        self.checkout = _Checkout(db)
        self.transaction: _Transaction | None = None

    async def __aenter__(self) -> Conn:
        conn = await self.checkout.__aenter__()
        try:
            self.transaction = _Transaction(conn)
            return await self.transaction.__aenter__()
        except BaseException as error:
            await self.checkout.__aexit__(type(error), error, error.__traceback__)
            raise

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        try:
            if self.transaction is not None:
                await self.transaction.__aexit__(exc_type, exc, tb)
        except BaseException as error:  # COMMIT or ROLLBACK failed: that is the error now
            await self.checkout.__aexit__(type(error), error, error.__traceback__)
            raise
        await self.checkout.__aexit__(exc_type, exc, tb)


class Database:
    """The pool, with connection() and transaction() blocks; and, when streaming replicas are
    attached (`use_replicas`), read() for the reads that tolerate lag."""

    def __init__(self, pool: aiopg.Pool):
        self.pool = pool
        # Receives trigger notices after commit (the request-context cache invalidates on them).
        self.notice_sink: NoticeSink | None = None
        # Wakes this process's relay once a committed write announced something (trigger
        # notices, Conn.announced); None: the rows wait for a relay's sweep.
        self.on_announced: AnnouncedHook | None = None
        self.replicas: list[Database] = []
        self.replica_wait = 0.0  # seconds a replica read waits for the caller's writes
        self.marks = WriteMarks()
        # read() outcomes: "replica", or why the primary answered ("lagging", "failed": a
        # replica read that failed, "no_replica": none healthy)
        self.replica_reads: collections.Counter[str] = collections.Counter()
        self._turn = 0

    def use_replicas(self, replicas: list[Database], *, wait: float) -> None:
        """Send read() to these replicas in turn; a read that must see a caller's writes
        waits up to `wait` seconds for a replica to replay them, then reads here."""
        self.replicas = replicas
        self.replica_wait = wait

    @property
    def dsn(self) -> str:
        """The pool's own DSN, password included (psycopg2's `conn.dsn` masks it)."""
        dsn: str = self.pool._dsn
        return dsn

    def connection(self) -> contextlib.AbstractAsyncContextManager[Conn]:
        return _Checkout(self)

    def transaction(self) -> contextlib.AbstractAsyncContextManager[Conn]:
        return _CheckoutTransaction(self)

    async def read(
        self,
        read: Callable[[Conn], Awaitable[T]],
        *,
        caller: Hashable | None = None,
        consistent_after: str | None = None,
    ) -> T:
        """Run `read(conn)` (statements only, no writes) on a healthy replica, or here.

        The replica must have replayed `consistent_after` (a WAL position) and the writes
        `caller` noted in `marks`: the first replica in turn gets `replica_wait` seconds to,
        the other healthy ones are asked once each, then the primary answers. A replica that
        fails (down, stalled, a read cancelled by replay) never fails the read: the next one
        or the primary answers it, and a replica found down is skipped until its probe sees
        it answer again. Without replicas this is `read` on a pooled connection.
        """
        if self.replicas:
            outcome = "no_replica"
            healthy = self._healthy_replicas()
            position = consistent_after
            if healthy and caller is not None and position is None:
                position = await self._position_of(caller)
            wait = self.replica_wait  # the first waits; the others are asked once each
            for replica in healthy:
                try:
                    async with replica.connection() as conn:
                        if position is not None:
                            caught_up = await self._replayed(conn, position, wait)
                            wait = 0.0
                            if not caught_up:
                                outcome = "lagging"  # past the bound: another, or the primary
                                continue
                        result = await read(conn)
                    self.replica_reads["replica"] += 1
                    return result
                except Exception as error:
                    if not _replica_may_fail(error):
                        raise
                    outcome = "failed"
                    log.info("a replica read failed (%s); reading elsewhere", _first_line(error))
                    health = getattr(replica.pool, "health", None)
                    if health is not None and is_connection_error(error):
                        health.suspect(_first_line(error))
            self.replica_reads[outcome] += 1
        async with self.connection() as conn:
            return await read(conn)

    def _healthy_replicas(self) -> list[Database]:
        """The replicas whose pools are not down, starting with the next in turn."""
        replicas = self.replicas
        start = self._turn % len(replicas)
        self._turn = start + 1
        turn = replicas[start:] + replicas[:start]
        return [r for r in turn if not getattr(r.pool, "down", False) and not r.pool.closed]

    async def _position_of(self, caller: Hashable) -> str | None:
        """The WAL position a replica must have replayed to show `caller` its own writes."""
        mark = self.marks.get(caller)
        if mark is None:
            return None
        position, token = mark
        if position is None:
            position = str(await self.fetch_val("SELECT pg_current_wal_insert_lsn()::text"))
            self.marks.resolve(caller, token, position)
        return position

    async def _replayed(self, conn: Conn, position: str, wait: float) -> bool:
        """Whether the replica of `conn` has replayed `position`, waiting up to `wait` s."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        pause = 0.002
        while True:
            # A server not in recovery (no replay position) has every write it will ever have.
            if await conn.fetch_val(_REPLAYED, {"position": position}):
                return True
            left = deadline - loop.time()
            if left <= 0:
                return False
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, 0.05)

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

    async def own_pool(self, size: int = 1) -> Database:
        """A pool of its own on the same database (opened on first use, with this pool's
        bound and health), for work that must not queue behind this pool's callers: the
        announcement relay, whose wait would delay every stream and cache invalidation under
        load."""
        pool = self.pool
        own = await create_database(pool._dsn, minsize=0, maxsize=size, bound=pool._timeout)
        if isinstance(pool, Pool) and isinstance(own.pool, Pool):
            pool.health.follow(own.pool)  # one outage, told once
        return own

    async def close(self) -> None:
        for replica in self.replicas:
            await replica.close()
        self.pool.close()
        await self.pool.wait_closed()


_REPLAYED = (
    "SELECT COALESCE(pg_last_wal_replay_lsn() >= %(position)s::pg_lsn, NOT pg_is_in_recovery())"
)


def _replica_may_fail(error: Exception) -> bool:
    """Whether the primary should answer a read that failed this way on a replica."""
    if is_connection_error(error) or isinstance(error, TimeoutError):
        return True
    code = getattr(error, "pgcode", None)
    return code in _REPLICA_RETRY_CODES


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


async def create_database(
    dsn: str, *, minsize: int = 1, maxsize: int = 10, bound: float = 30.0
) -> Database:
    """A pool of `minsize`..`maxsize` connections; `bound` (seconds) limits each statement and each
    wait for a pooled connection."""
    # aiopg would otherwise adapt every dict as hstore; we want dicts as jsonb.
    pool = await Pool.from_pool_fill(
        dsn,
        minsize,
        maxsize,
        bound,
        enable_json=True,
        enable_hstore=False,
        enable_uuid=True,
        echo=False,
        on_connect=None,
        pool_recycle=-1.0,
    )
    assert isinstance(pool, Pool)
    return Database(pool)


def new_id() -> uuid.UUID:
    return uuid.uuid4()


# The application's pool, for the kernel's own routes and hooks (probes, rate limits).
DATABASE = web.AppKey("database", Database)
