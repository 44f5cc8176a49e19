"""scripts/cluster: a cluster that loses nothing (issue 31, part 4).

A private PostgreSQL primary, a streaming replica of it (`pg_basebackup -R`), a private
nats-server (JetStream on, its own store) and three `tenantd serve` (TENANTD_BUS=nats,
DATABASE_REPLICA_URLS=the replica, QUEUES_ENABLED on), all on loopback or Unix sockets. A
bounded load runs against them: sign-ins and token refreshes, notification sends over the
server API with an API key (retried with their Idempotency-Key), one SSE reader per user
spread over the three instances, and races for the last seats of accounts with a seat cap
(invitees accepting at once on different instances, one of them twice; the staff
transferring the ownership among them at the same time; the winners removed and invited
again, round after round). During the load one instance is killed with SIGKILL (while race
requests are in flight on it) and started again, NATS is killed and started again, and the
replica's replay is paused, then resumed. Every fault waits for progress (sends accepted,
seat races finished), never for a guessed time.

Afterwards, by the HTTP answers and SQL only (no internals of how tenantd publishes):

- deliveries: every accepted send has exactly one notification and one delivery row per
  channel of its event (in-app and SSE), and no notification beyond them;
- sse: every reader received every notification of its user (after reconnecting with
  Last-Event-ID where its stream broke); ids seen twice are counted and shown, not failed;
- sessions: no sign-in or refresh was refused; a request that failed did so only because it
  was on the killed instance, and its retry elsewhere succeeded;
- seat races: no race took more seats than were free, by the API's answers or by SQL (an
  accept that committed but whose answer was lost on the killed instance counts as taken:
  its retry answers 410); every 200 has its membership; no race ended over the cap or
  without exactly one owner; the refusals (SEAT_LIMIT_REACHED, 403 on a transfer) counted;
- the SERVICE.md invariants: one active owner per live account, at most one active membership
  per (account, user), no account over its seat cap;
- the replica replayed everything once resumed.

Prints a table and exits non-zero when a check fails. See docs/scaling.md, "A cluster test".
The test (tests/cluster/test_cluster.py) runs `run()` at the "test" size.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import shutil
import signal
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.faults import ROOT, Server
from bench.private_servers import WITHIN, PrivateServer, ReplicaPair, until
from tenantd.accounts import queries as account_queries
from tenantd.accounts.provisioning import create_account
from tenantd.apikeys import service as apikeys
from tenantd.app.settings import load_settings
from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.identity import queries as identity_queries
from tenantd.identity.passwords import hash_password

SECRET = "cluster-secret-key-0123456789abcdefghijklmnopqrstuvwxyz"
PASSWORD = "cluster load passphrase"
ORIGIN = "http://127.0.0.1:8080"  # PUBLIC_BASE_URL: the Origin a browser would send
EVENT = "bench.event"  # bench/events.py: in-app + SSE
CHANNELS = {"in_app": 1, "sse": 1}  # the delivery rows each accepted send must have
STREAM = "/api/v1/notifications/stream"
INSTANCES = 3
SERVE_WITHIN = 600.0  # seconds for a `tenantd serve` to answer /readyz (a loaded machine)


@dataclass(frozen=True)
class Size:
    users: int  # one SSE reader each; also the recipients of the sends
    sends: int  # at least this many sends (the load goes on until every fault is done)
    rate: float  # sends started per second
    sessions: int  # clients that sign in, then refresh, in a loop
    contests: int  # accounts with a seat cap whose last seats are raced for, in a loop
    invitees: int  # per contested account: users invited, accepting at once
    seats: int  # the contested accounts' seat cap (STAFF of them taken by owner and admins)


SIZES = {
    "test": Size(users=9, sends=120, rate=15.0, sessions=4, contests=2, invitees=4, seats=5),
    "default": Size(users=30, sends=600, rate=30.0, sessions=6, contests=4, invitees=5, seats=6),
}


# --- the processes ---------------------------------------------------------------------------


def server_env(pair: ReplicaPair, nats: PrivateServer, root: Path) -> dict[str, str]:
    return {
        "DATABASE_URL": pair.primary.url,
        "DATABASE_REPLICA_URLS": pair.replica.url,
        "TENANTD_BUS": "nats",
        "NATS_URL": nats.url,
        "SECRET_KEY": SECRET,
        "TENANTD_DATA_DIR": str(root / "data"),
        "TENANTD_ENV_FILE": "",  # not the host's /etc/tenantd/tenantd.env
        "PUBLIC_BASE_URL": ORIGIN,
        "COOKIE_SECURE": "false",
        "EMAIL_PROVIDER": "file",
        "EMAIL_FILE_DIR": str(root / "mail"),
        "LOG_LEVEL": "warning",
        "QUEUES_ENABLED": "true",
        "NOTIFICATIONS_SSE_ENABLED": "true",
        "RATE_LIMIT_ENABLED": "false",
        "TENANTD_SCHEDULER_ENABLED": "false",
        "TENANTD_EVENT_MODULES": "bench.events",
        "TENANTD_JOB_POLL_SECONDS": "0.05",
        "JOB_LEASE_SECONDS": "5",  # the killed instance's claimed jobs run again soon
        "PYTHONPATH": str(ROOT),
        "PYTHONUNBUFFERED": "1",
    }


# --- the world and its clients --------------------------------------------------------------


@dataclass
class User:
    id: str
    email: str
    access: str = ""  # the reader's access token (its own sign-in)


@dataclass
class Failure:
    """A request that did not succeed at once: what, where, and whether that was allowed."""

    kind: str  # signin | refresh | read | send | stream
    instance: str
    reason: str
    on_killed: bool  # the request's instance had been killed
    recovered: bool = False  # a retry elsewhere succeeded


@dataclass
class World:
    root: Path
    env: dict[str, str]
    http: aiohttp.ClientSession
    token: str = ""
    users: list[User] = field(default_factory=list)
    slots: list[Server] = field(default_factory=list)  # the live instances, by slot
    started: list[Server] = field(default_factory=list)  # every instance ever started
    killed: set[int] = field(default_factory=set)  # id() of the killed servers
    failures: list[Failure] = field(default_factory=list)
    counts: collections.Counter[str] = field(default_factory=collections.Counter)
    accepted: dict[int, tuple[str, str]] = field(default_factory=dict)  # n -> (user, id)
    warmups: list[str] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    budget: int = 0  # sends the load may start so far (the faults raise it)
    contests: list[Contest] = field(default_factory=list)
    rounds: list[Round] = field(default_factory=list)  # every finished seat race
    answers: collections.Counter[str] = field(default_factory=collections.Counter)
    unexpected: list[str] = field(default_factory=list)  # membership answers not allowed
    contests_stopped: bool = False  # a seat race raised (shown among the unexpected)
    racing: collections.Counter[str] = field(default_factory=collections.Counter)
    # ^ per instance URL: race requests (accepts, transfers) in flight there now
    faults_done: bool = False
    load_done: bool = False

    def start(self, name: str) -> Server:
        server = Server(self.env, self.root, name)
        self.started.append(server)
        return server

    def server(self, slot: int) -> Server:
        """The instance of `slot`; a killed one is out of rotation (as a load balancer takes
        it out) until its replacement is ready."""
        for step in range(len(self.slots)):
            server = self.slots[(slot + step) % len(self.slots)]
            if id(server) not in self.killed:
                return server
        raise RuntimeError("no live instance")

    def failed(self, kind: str, server: Server, reason: str) -> Failure:
        failure = Failure(kind, server.url, reason, id(server) in self.killed)
        self.failures.append(failure)
        return failure


async def call(
    world: World,
    kind: str,
    slot: int,
    method: str,
    path: str,
    failures: list[Failure] | None = None,
    **kwargs: Any,
) -> tuple[int, Any, dict[str, str]]:
    """One request, retried on the next instance until answered below 500: status, body and
    the cookies set. A failure is recorded with its instance (recovered once a retry works),
    and in `failures` when given (the caller learns that its request was tried again)."""
    failures = [] if failures is None else failures
    deadline = time.monotonic() + WITHIN
    while True:
        server = world.server(slot)
        racing = kind in RACES
        world.racing[server.url] += racing
        try:
            async with world.http.request(
                method, server.url + path, timeout=aiohttp.ClientTimeout(total=30), **kwargs
            ) as response:
                world.racing[server.url] -= racing
                racing = False
                body = await response.json(content_type=None)
                if response.status < 500:
                    for failure in failures:
                        failure.recovered = True
                    cookies = {k: v.value for k, v in response.cookies.items()}
                    return response.status, body, cookies
                failures.append(world.failed(kind, server, f"HTTP {response.status}"))
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            failures.append(world.failed(kind, server, type(error).__name__))
        finally:
            world.racing[server.url] -= racing
        if time.monotonic() > deadline:
            raise RuntimeError(f"{kind} {path}: no instance answered in {WITHIN:.0f} s")
        slot += 1
        await asyncio.sleep(0.1)


def cookie(**values: str) -> dict[str, str]:
    return {"Cookie": "; ".join(f"{k}={v}" for k, v in values.items())}


async def sign_in(world: World, user: User, slot: int) -> dict[str, str] | None:
    status, body, cookies = await call(
        world,
        "signin",
        slot,
        "POST",
        "/api/v1/auth/login",
        json={"email": user.email, "password": PASSWORD},
        headers={"Origin": ORIGIN},
    )
    world.counts["signin"] += 1
    if status != 200:
        world.failed("signin", world.server(slot), f"refused {status}: {body}")
        return None
    return cookies


async def session_client(world: World, number: int) -> None:
    """Sign in, refresh (each on the next instance) and read the inbox, until the load ends."""
    slot = number
    while not world.load_done:
        user = world.users[number % len(world.users)]
        cookies = await sign_in(world, user, slot)
        if cookies is None:
            return
        for _ in range(5):
            await asyncio.sleep(0.2)  # a client's pace: the load stays bounded
            slot += 1
            status, body, fresh = await call(
                world,
                "refresh",
                slot,
                "POST",
                "/api/v1/auth/refresh",
                headers={"Origin": ORIGIN, **cookie(refresh_token=cookies["refresh_token"])},
            )
            world.counts["refresh"] += 1
            if status != 200 or "refresh_token" not in fresh:
                world.failed("refresh", world.server(slot), f"refused {status}: {body}")
                return
            cookies = fresh
            status, body, _ = await call(
                world,
                "read",
                slot,
                "GET",
                "/api/v1/notifications?limit=5",
                headers=cookie(auth_token=cookies["auth_token"]),
            )
            world.counts["read"] += 1
            if status != 200:
                world.failed("read", world.server(slot), f"refused {status}: {body}")
            if world.load_done:
                return


async def send(world: World, user: User, n: int, key: str) -> str:
    """One send with its Idempotency-Key, retried on the next instance until accepted."""
    status, body, _ = await call(
        world,
        "send",
        n,
        "POST",
        "/api/v1/notifications/send",
        json={"type": EVENT, "recipientUserId": user.id, "payload": {"n": n}},
        headers={"Authorization": f"Bearer {world.token}", "Idempotency-Key": key},
    )
    if status != 202:
        raise RuntimeError(f"send {n} refused: {status} {body}")
    return str(body["data"]["id"])


async def send_load(world: World, size: Size) -> None:
    """Sends started at `size.rate` per second, at most 16 in flight, within the budget the
    faults set (so a slow fault does not let the load run ahead), until every fault is done
    and the budget is spent."""
    slots = asyncio.Semaphore(16)
    tasks = []
    gap = 1 / size.rate

    async def one(n: int) -> None:
        async with slots:
            user = world.users[n % len(world.users)]
            world.accepted[n] = (user.id, await send(world, user, n, f"cluster-{n}"))

    n = 0
    while not (world.faults_done and n >= world.budget):
        if n >= world.budget:
            await asyncio.sleep(0.05)
            continue
        tasks.append(asyncio.create_task(one(n)))
        n += 1
        await asyncio.sleep(gap)
    await asyncio.gather(*tasks)


# --- membership contention -----------------------------------------------------------------
#
# Each contested account has a seat cap, an owner and two admins (STAFF: they transfer the
# ownership among them) and `invitees` invited users, more than the free seats. A round, in
# a loop until the load ends, each request on another instance: the invitees who won the last
# race are removed and invited again; then at once every invitee accepts (the first one twice,
# on two instances) while each staff member transfers the ownership to each other one. The
# membership routes take no Idempotency-Key: a retried accept carries the same invitation
# token (an accept that committed before its instance died answers 410 on the retry), and
# the round's outcome is read by SQL, so a lost answer is not taken for a refusal.

STAFF = 3
RACES = {"accept", "transfer"}  # the requests a kill -9 lands on (World.racing)
MEMBER_ROLE = "member"
# (kind, status, code) answers that are part of the contest; anything else is unexpected.
ALLOWED = {
    ("accept", 200, ""),
    ("accept", 409, "SEAT_LIMIT_REACHED"),
    ("accept", 409, "CONFLICT"),  # already a member: the same user's other accept won
    ("accept", 410, "INVITATION_ALREADY_USED"),  # the same user's other accept (or try) won
    ("transfer", 200, ""),
    ("transfer", 403, "FORBIDDEN"),  # no longer (or not yet) the owner
    ("remove", 200, ""),
    ("invite", 201, ""),
    ("resend", 200, ""),
}
# Answers allowed only to a request tried again after its instance died (the first committed).
AFTER_RETRY = {("remove", 404, "NOT_FOUND"), ("invite", 409, "CONFLICT")}


@dataclass
class Contest:
    account_id: str
    staff: list[User]  # the owner first; each signed in with the account active
    invitees: list[User]  # each signed in (no account of its own)
    tokens: dict[str, tuple[str, str]] = field(default_factory=dict)  # user: (invitation, raw)

    def path(self, tail: str) -> str:
        return f"/api/v1/accounts/{self.account_id}{tail}"


@dataclass
class Attempt:
    """One accept: whose, its answer, and whether a try failed first (the killed instance)."""

    user_id: str
    status: int
    code: str
    retried: bool


@dataclass
class Round:
    """One race for the free seats of a contested account, as the API answered it and as
    SQL found it afterwards."""

    account_id: str
    cap: int
    free: int  # seats free when the race started (SQL)
    attempts: list[Attempt]
    accepted: set[str]  # invitees whose raced invitation is accepted (SQL)
    active: int  # active memberships after the race (SQL)
    owners: int  # active owners after the race (SQL)
    transfers: int  # transfers answered 200
    during: bool  # started between the first fault and the end of the last

    @property
    def taken(self) -> set[str]:
        return {a.user_id for a in self.attempts if a.status == 200}


def error_code(status: int, body: Any) -> str:
    if status < 300 or not isinstance(body, dict):
        return ""
    return str((body.get("error") or {}).get("code", ""))


async def member_call(
    world: World, kind: str, slot: int, user: User, method: str, path: str, **kwargs: Any
) -> tuple[int, str, Any, bool]:
    """A membership request as `user` (its access token): status, error code, body, and
    whether it was tried again; an answer outside the contest's is recorded as unexpected."""
    failures: list[Failure] = []
    headers = {"Origin": ORIGIN, **cookie(auth_token=user.access)}
    status, body, _ = await call(
        world, kind, slot, method, path, failures, headers=headers, **kwargs
    )
    code = error_code(status, body)
    world.answers[f"{kind} {status} {code}".strip()] += 1
    answer = (kind, status, code)
    if answer not in ALLOWED and not (failures and answer in AFTER_RETRY):
        world.unexpected.append(f"{kind} {path}: {status} {code} {body}"[:300])
    return status, code, body, bool(failures)


async def invite(world: World, contest: Contest, invitee: User, by: User, slot: int) -> None:
    """Invite `invitee` again (its last invitation was accepted); a retry that finds the first
    try's invitation pending resends it for a token."""
    status, code, body, _ = await member_call(
        world,
        "invite",
        slot,
        by,
        "POST",
        contest.path("/invitations"),
        json={"email": invitee.email, "role": MEMBER_ROLE},
    )
    if status == 409 and code == "CONFLICT" and "invitationId" in body["error"].get("details", {}):
        iid = body["error"]["details"]["invitationId"]
        status, code, body, _ = await member_call(
            world, "resend", slot, by, "POST", contest.path(f"/invitations/{iid}/resend")
        )
    if status in (200, 201):
        issued = body["data"]
        contest.tokens[invitee.id] = (str(issued["invitation"]["id"]), issued["token"])


async def accept(world: World, invitee: User, token: str, slot: int) -> Attempt:
    status, code, _body, retried = await member_call(
        world, "accept", slot, invitee, "POST", "/api/v1/invitations/accept", json={"token": token}
    )
    return Attempt(invitee.id, status, code, retried)


async def transfer(world: World, contest: Contest, by: User, to: User, slot: int) -> bool:
    status, *_ = await member_call(
        world,
        "transfer",
        slot,
        by,
        "POST",
        contest.path("/transfer-ownership"),
        json={"userId": to.id},
    )
    return status == 200


CONTEST_STATE = (
    "SELECT (SELECT COALESCE(ap.seats, p.seats) FROM account_plans ap"
    "  JOIN plans p ON p.code = ap.plan_code WHERE ap.account_id = %(a)s) AS cap,"
    " (SELECT count(*) FROM memberships WHERE account_id = %(a)s AND revoked_at IS NULL)"
    "  AS active,"
    " (SELECT count(*) FROM memberships WHERE account_id = %(a)s AND revoked_at IS NULL"
    "  AND role = 'owner') AS owners,"
    " (SELECT COALESCE(array_agg(user_id::text), '{}') FROM memberships"
    "  WHERE account_id = %(a)s AND revoked_at IS NULL AND user_id = ANY(%(i)s::uuid[]))"
    "  AS members,"
    " (SELECT COALESCE(array_agg(accepted_by::text), '{}') FROM invitations"
    "  WHERE id = ANY(%(raced)s::uuid[]) AND accepted_at IS NOT NULL) AS accepted"
)


async def contest_state(db: Any, contest: Contest, raced: list[str]) -> dict[str, Any]:
    row = await db.fetch_one(
        CONTEST_STATE,
        {"a": contest.account_id, "i": [u.id for u in contest.invitees], "raced": raced},
    )
    return dict(row)


async def contest_round(world: World, db: Any, contest: Contest, number: int) -> Round:
    staff, invitees = contest.staff, contest.invitees
    before = await contest_state(db, contest, [])
    winners = [u for u in invitees if u.id in set(before["members"])]
    await asyncio.gather(
        *(
            member_call(
                world,
                "remove",
                number + i,
                staff[(number + i) % STAFF],
                "DELETE",
                contest.path(f"/members/{u.id}"),
            )
            for i, u in enumerate(winners)
        )
    )
    await asyncio.gather(
        *(
            invite(world, contest, u, staff[(number + i) % STAFF], number + i)
            for i, u in enumerate(invitees)
            if u.id not in contest.tokens
        )
    )
    raced = {u.id: contest.tokens[u.id] for u in invitees if u.id in contest.tokens}
    state = await contest_state(db, contest, [])
    during = bool(world.killed) and not world.faults_done
    first = invitees[0]
    accepts = [accept(world, u, raced[u.id][1], number + i) for i, u in enumerate(invitees)]
    if first.id in raced:  # the same user accepting twice, on another instance
        accepts.append(accept(world, first, raced[first.id][1], number + 1))
    transfers = [
        transfer(world, contest, by, to, number + i + j)
        for i, by in enumerate(staff)
        for j, to in enumerate(staff)
        if by is not to
    ]
    answers = await asyncio.gather(*accepts, *transfers)
    after = await contest_state(db, contest, [iid for iid, _token in raced.values()])
    accepted = set(after["accepted"])
    for user_id in accepted:
        contest.tokens.pop(user_id, None)  # used: the next round invites again
    return Round(
        account_id=contest.account_id,
        cap=int(state["cap"]),
        free=int(state["cap"]) - int(state["active"]),
        attempts=[a for a in answers if isinstance(a, Attempt)],
        accepted=accepted,
        active=int(after["active"]),
        owners=int(after["owners"]),
        transfers=sum(1 for a in answers if a is True),
        during=during,
    )


async def sign_in_contests(world: World) -> None:
    """Staff and invitees signed in, each on another instance (at once)."""
    users = [u for c in world.contests for u in (*c.staff, *c.invitees)]
    answers = await asyncio.gather(*(sign_in(world, u, i) for i, u in enumerate(users)))
    for user, cookies in zip(users, answers, strict=True):
        if cookies is None:
            raise RuntimeError(f"{user.email} could not sign in")
        user.access = cookies["auth_token"]


async def contend(world: World, db: Any, contest: Contest, number: int) -> None:
    """Race rounds on `contest` until the load ends (each finishes what it started)."""
    try:
        while not world.load_done:
            world.rounds.append(await contest_round(world, db, contest, number))
            number += 1
            await asyncio.sleep(0.2)  # a client's pace: the load stays bounded
    except Exception as error:  # shown by the checks; the faults stop waiting for races
        world.unexpected.append(f"seat race stopped: {error!r}"[:300])
        world.contests_stopped = True


def zero(name: str, count: int) -> Check:
    """A count that must be zero."""
    return Check(name, str(count), count == 0)


def contest_checks(world: World) -> list[Check]:
    """The API's answers and SQL agree that no race took more seats than were free, and no
    account ended a round over its cap or without exactly one owner."""
    rounds = world.rounds
    attempts = [a for r in rounds for a in r.attempts]
    codes = collections.Counter(a.code or "accepted" for a in attempts)
    too_many = [r for r in rounds if max(len(r.taken), len(r.accepted)) > r.free]
    unbacked = sum(len(r.taken - r.accepted) for r in rounds)
    twice = sum(
        1
        for r in rounds
        for user, n in collections.Counter(a.user_id for a in r.attempts if a.status == 200).items()
        if n > 1
    )

    def explained(r: Round, user: str) -> bool:
        return any(a.user_id == user and a.retried for a in r.attempts)

    lost = [(r, u) for r in rounds for u in r.accepted - r.taken]
    unexplained = [pair for pair in lost if not explained(*pair)]
    over = sum(1 for r in rounds if r.active > r.cap)
    owners = sum(1 for r in rounds if r.owners != 1)
    removed = world.answers["remove 200"]
    faulted = sum(1 for r in rounds if r.during)
    return [
        Check(
            "seat races (rounds, of them during the faults)",
            f"{len(rounds)} on {len(world.contests)} accounts, {faulted}",
            len(rounds) > 0,
        ),
        Check(
            "accepts: taken / SEAT_LIMIT_REACHED / already used or member",
            f"{codes['accepted']} / {codes['SEAT_LIMIT_REACHED']}"
            f" / {codes['INVITATION_ALREADY_USED'] + codes['CONFLICT']}",
            codes["accepted"] > 0 and codes["SEAT_LIMIT_REACHED"] > 0,
        ),
        zero("races that took more seats than were free (API or SQL)", len(too_many)),
        zero("accepts answered 200 without their membership", unbacked),
        zero("users answered 200 twice in one race", twice),
        Check(
            "accepts committed, answer lost on the killed instance (retried)",
            f"{len(lost) - len(unexplained)}",
            True,
        ),
        zero("accepts committed, answered otherwise unexplained", len(unexplained)),
        zero("races ending over the seat cap (SQL)", over),
        zero("races ending without exactly one owner (SQL)", owners),
        Check(
            "ownership transfers done / refused (403)",
            f"{sum(r.transfers for r in rounds)} / {world.answers['transfer 403 FORBIDDEN']}",
            sum(r.transfers for r in rounds) > 0,
        ),
        Check(
            "members removed / invited again",
            f"{removed} / {world.answers['invite 201'] + world.answers['resend 200']}",
            removed > 0,
        ),
        Check(
            "membership answers outside the contest's",
            f"{len(world.unexpected)} {'; '.join(world.unexpected[:3])}".strip(),
            not world.unexpected,
        ),
    ]


# --- SSE readers ----------------------------------------------------------------------------


@dataclass
class Reader:
    user: User
    slot: int
    ids: list[str] = field(default_factory=list)  # every id received, in order, repeats too
    last_id: str | None = None
    connects: int = 0
    refusals: list[str] = field(default_factory=list)
    resumed_after: list[str] = field(default_factory=list)  # each reconnection's Last-Event-ID

    async def run(self, world: World) -> None:
        """Read the stream; when it breaks, reconnect to the next instance with
        Last-Event-ID, as a browser's EventSource does."""
        while True:
            server = world.server(self.slot)
            headers = cookie(auth_token=self.user.access)
            if self.last_id is not None:
                headers["Last-Event-ID"] = self.last_id
                if self.connects:
                    self.resumed_after.append(self.last_id)
            try:
                async with world.http.get(
                    server.url + STREAM,
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=90),
                ) as response:
                    if response.status != 200:
                        self.refusals.append(f"{server.url}: HTTP {response.status}")
                    else:
                        self.connects += 1
                        await self.read(response)
            except (aiohttp.ClientError, TimeoutError):
                pass
            self.slot += 1
            await asyncio.sleep(0.2)  # EventSource's reconnection delay, not a guess

    async def read(self, response: aiohttp.ClientResponse) -> None:
        buffer = b""
        while True:
            chunk = await response.content.readany()
            if not chunk:
                return
            buffer += chunk
            while b"\n\n" in buffer:
                block, buffer = buffer.split(b"\n\n", 1)
                lines = block.split(b"\n")
                ids = [line[3:].strip().decode() for line in lines if line.startswith(b"id:")]
                if ids and any(line.startswith(b"data:") for line in lines):
                    self.ids.append(ids[-1])
                    self.last_id = ids[-1]


async def readers_ready(world: World, readers: list[Reader]) -> None:
    """Every stream open, and each has received a first (warm-up) notification, so its
    subscription works and it holds a Last-Event-ID. A reader that has nothing after 10 s gets
    another warm-up (its first may have been published before it subscribed)."""
    await until(lambda: all(r.connects for r in readers), "every SSE stream open")
    sent_at: dict[str, float] = {}
    deadline = time.monotonic() + WITHIN
    while not all(r.ids for r in readers):
        for reader in readers:
            if not reader.ids and time.monotonic() - sent_at.get(reader.user.id, -1e9) > 10:
                sent_at[reader.user.id] = time.monotonic()
                key = f"warmup-{uuid.uuid4()}"
                world.warmups.append(await send(world, reader.user, -1, key))
        if time.monotonic() > deadline:
            raise RuntimeError("an SSE reader never received its warm-up notification")
        await asyncio.sleep(0.05)


# --- faults ---------------------------------------------------------------------------------


async def progress(world: World, fraction: float, size: Size) -> None:
    """Let `fraction` of the planned sends more than are accepted now start (and 16 beyond,
    so sends are in flight at the next fault); wait until that many more are accepted, and
    as many more seat races as there are contested accounts have finished."""
    step = int(fraction * size.sends)
    target = len(world.accepted) + step
    world.budget = max(world.budget, target + 16)
    await until(lambda: len(world.accepted) >= target, f"{target} sends accepted")
    races = len(world.rounds) + len(world.contests)  # and the seat races went on meanwhile
    await until(
        lambda: len(world.rounds) >= races or world.contests_stopped, f"{races} seat races done"
    )


async def faults(world: World, size: Size, nats: PrivateServer, pair: ReplicaPair) -> None:
    await progress(world, 0.2, size)
    victim = world.slots[0]
    # Killed while seat race requests wait for its answer: their retries go to the others.
    await until(
        lambda: world.racing[victim.url] > 0 or world.contests_stopped,
        "a seat race request in flight on the instance to kill",
    )
    world.killed.add(id(victim))
    victim.signal(signal.SIGKILL)
    await asyncio.to_thread(victim.process.wait, 30)
    killed = time.monotonic()
    world.budget += int(0.1 * size.sends)  # the load goes on while the instance restarts
    replacement = world.start("instance-0b")
    await replacement.ready(world.http, SERVE_WITHIN)
    world.slots[0] = replacement
    world.faults.append(
        f"kill -9 of instance 0 ({victim.url}); its replacement ready after"
        f" {time.monotonic() - killed:.1f} s"
    )

    await progress(world, 0.15, size)
    await nats.stop()
    down = time.monotonic()
    await nats.start(WITHIN)
    world.faults.append(f"nats-server killed and started again ({time.monotonic() - down:.1f} s)")

    await progress(world, 0.15, size)
    await asyncio.to_thread(pair.pause_replay)
    paused = time.monotonic()
    await progress(world, 0.15, size)
    state = await asyncio.to_thread(
        pair.query, pair.replica, "SELECT pg_get_wal_replay_pause_state()"
    )
    await asyncio.to_thread(pair.resume_replay)
    world.faults.append(
        f"replica replay paused for {time.monotonic() - paused:.1f} s (state: {state})"
    )
    world.budget = max(world.budget, size.sends)  # and the rest of the load after the faults
    world.faults_done = True


# --- checks ---------------------------------------------------------------------------------


@dataclass
class Check:
    name: str
    value: str
    ok: bool


@dataclass
class Result:
    checks: list[Check]
    faults: list[str]
    figures: dict[str, Any]

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    def check(self, name: str) -> Check:
        return next(check for check in self.checks if check.name == name)


async def check_deliveries(db: Any, world: World) -> list[Check]:
    """Wait (bounded) until every accepted send's rows are written and settled, then judge."""
    ids = [nid for _user, nid in world.accepted.values()] + world.warmups

    async def settled() -> bool:
        pending = await db.fetch_val(
            "SELECT (SELECT count(*) FROM notifications WHERE id = ANY(%(ids)s::uuid[]))"
            " <> %(n)s OR EXISTS (SELECT 1 FROM notification_deliveries"
            "  WHERE notification_id = ANY(%(ids)s::uuid[]) AND status = 'pending')",
            {"ids": ids, "n": len(set(ids))},
        )
        return not pending

    with contextlib.suppress(RuntimeError):
        await until(settled, "every accepted send's rows written and settled")
    rows = await db.fetch_all(
        "SELECT n.id::text AS id, d.channel, d.status FROM notifications n"
        " LEFT JOIN notification_deliveries d ON d.notification_id = n.id"
        " WHERE n.id = ANY(%(ids)s::uuid[])",
        {"ids": ids},
    )
    total = await db.fetch_val(
        "SELECT count(*) FROM notifications WHERE user_id = ANY(%(u)s::uuid[])"
        " AND event_type = %(t)s",
        {"u": [u.id for u in world.users], "t": EVENT},
    )
    return delivery_checks(len(world.accepted), ids, [dict(r) for r in rows], int(total))


def delivery_checks(
    accepted: int, ids: list[str], rows: list[dict[str, Any]], total: int
) -> list[Check]:
    """`rows`: (id, channel, status) of the accepted notifications and their deliveries;
    `total`: every notification of the event for the run's users."""
    channels: dict[str, collections.Counter[str]] = {i: collections.Counter() for i in ids}
    statuses: collections.Counter[str] = collections.Counter()
    for row in rows:
        if row["channel"] is not None:
            channels[row["id"]][row["channel"]] += 1
            statuses[f"{row['channel']}:{row['status']}"] += 1
    missing = sum(1 for i in ids if not channels[i])
    wrong = sum(1 for i in ids if channels[i] and dict(channels[i]) != CHANNELS)
    not_sent = sum(c for k, c in statuses.items() if not k.endswith(":sent"))
    extra = total - len(set(ids))
    return [
        Check("sends accepted", str(accepted), accepted > 0),
        Check("sends without their rows (lost)", str(missing), missing == 0),
        Check("sends with other than one row per channel", str(wrong), wrong == 0),
        Check("delivery rows not sent", f"{not_sent} ({dict(statuses)})", not_sent == 0),
        Check("notifications beyond the accepted (doubled)", str(extra), extra == 0),
    ]


def wanted_by_user(world: World) -> dict[str, set[str]]:
    wanted: dict[str, set[str]] = collections.defaultdict(set)
    for user_id, nid in world.accepted.values():
        wanted[user_id].add(nid)
    return wanted


async def check_streams(db: Any, world: World, readers: list[Reader]) -> list[Check]:
    """Wait (bounded) until every reader has every notification of its user, then judge."""
    wanted = wanted_by_user(world)
    with contextlib.suppress(RuntimeError):
        await until(
            lambda: all(wanted[r.user.id] <= set(r.ids) for r in readers),
            "every reader has every notification of its user",
        )
    checks = stream_checks(wanted, readers)
    missed = [(r, nid) for r in readers for nid in sorted(wanted[r.user.id] - set(r.ids))]
    if missed:
        checks.append(Check("sse missed, why", await explain_missed(db, missed), True))
    return checks


async def explain_missed(db: Any, missed: list[tuple[Reader, str]]) -> str:
    """For each missed notification: when it was created and committed against the
    Last-Event-IDs its reader resumed after (a replay returns what was created after them)."""
    ids = [nid for _r, nid in missed] + [i for r, _n in missed for i in r.resumed_after]
    rows = await db.fetch_all(
        "SELECT id::text AS id, created_at FROM notifications WHERE id = ANY(%(ids)s::uuid[])",
        {"ids": ids},
    )
    created = {row["id"]: row["created_at"] for row in rows}
    parts = []
    for reader, nid in missed:
        later = [i for i in reader.resumed_after if i in created and created[i] > created[nid]]
        parts.append(
            f"{nid} created {created.get(nid)}; its reader resumed after"
            f" {len(reader.resumed_after)} id(s), {len(later)} of them created later"
        )
    return "; ".join(parts[:5])


def stream_checks(wanted: dict[str, set[str]], readers: list[Reader]) -> list[Check]:
    missing = sum(len(wanted[r.user.id] - set(r.ids)) for r in readers)
    repeats = sum(len(r.ids) - len(set(r.ids)) for r in readers)
    reconnects = sum(max(r.connects - 1, 0) for r in readers)
    refusals = [refusal for r in readers for refusal in r.refusals]
    delivered = sum(len(wanted[r.user.id] & set(r.ids)) for r in readers)
    return [
        Check("sse notifications received", f"{delivered} of {delivered + missing}", True),
        Check("sse notifications missed", str(missing), missing == 0),
        Check("sse ids received twice (not a failure)", str(repeats), True),
        Check("sse reconnections (Last-Event-ID)", str(reconnects), True),
        Check("sse streams refused", str(len(refusals)), not refusals),
    ]


def check_sessions(world: World) -> list[Check]:
    """Only the killed instance's in-flight requests may have failed, and each must have
    succeeded on its retry; no sign-in or refresh was refused."""
    counts = world.counts
    wrong = [f for f in world.failures if not (f.on_killed and f.recovered)]
    shown = "; ".join(f"{f.kind} on {f.instance}: {f.reason}" for f in wrong[:5])
    allowed = collections.Counter(f.kind for f in world.failures if f.on_killed and f.recovered)
    return [
        Check(
            "sign-ins / refreshes / inbox reads",
            f"{counts['signin']} / {counts['refresh']} / {counts['read']}",
            counts["signin"] > 0 and counts["refresh"] > 0,
        ),
        Check(
            "failed on the killed instance, then retried fine",
            ", ".join(f"{k} {v}" for k, v in sorted(allowed.items())) or "0",
            True,
        ),
        Check("refused or failed otherwise", f"{len(wrong)} {shown}".strip(), not wrong),
    ]


INVARIANTS = {
    "accounts without exactly one active owner": (
        "SELECT count(*) FROM accounts a WHERE a.deleted_at IS NULL AND (SELECT count(*)"
        " FROM memberships m WHERE m.account_id = a.id AND m.role = 'owner'"
        " AND m.revoked_at IS NULL) <> 1"
    ),
    "(account, user) with more than one active membership": (
        "SELECT count(*) FROM (SELECT 1 FROM memberships WHERE revoked_at IS NULL"
        " GROUP BY account_id, user_id HAVING count(*) > 1) twice"
    ),
    "accounts over their seat cap": (
        "SELECT count(*) FROM accounts a JOIN account_plans ap ON ap.account_id = a.id"
        " JOIN plans p ON p.code = ap.plan_code WHERE a.deleted_at IS NULL"
        " AND (SELECT count(*) FROM memberships m WHERE m.account_id = a.id"
        "  AND m.revoked_at IS NULL) > COALESCE(ap.seats, p.seats)"
    ),
}


async def check_invariants(db: Any) -> list[Check]:
    checks = []
    for name, sql in INVARIANTS.items():
        count = int(await db.fetch_val(sql))
        checks.append(Check(name, str(count), count == 0))
    accounts = int(await db.fetch_val("SELECT count(*) FROM accounts WHERE deleted_at IS NULL"))
    checks.append(Check("live accounts checked", str(accounts), accounts > 0))
    return checks


# --- the run --------------------------------------------------------------------------------


async def prepare(world: World, size: Size) -> Any:
    """The users (each with an account of its own), the API key, the contested accounts;
    the database handle."""
    settings = load_settings(environ=world.env)
    db = await create_database(url_to_dsn(world.env["DATABASE_URL"]), minsize=1, maxsize=4)
    password_hash = await hash_password(PASSWORD)
    async with db.transaction() as conn:
        for number in range(size.users):
            user = await new_user(conn, f"cluster{number}", password_hash)
            await create_account(
                conn, settings, owner_id=uuid.UUID(user.id), name=f"Cluster {number}"
            )
            world.users.append(user)
        created = await apikeys.create_key(
            conn, secret_key=SECRET, name="cluster", scopes="notifications:send"
        )
        for number in range(size.contests):
            world.contests.append(await contested(conn, settings, size, number, password_hash))
    world.token = created.token
    return db


async def new_user(conn: Any, name: str, password_hash: str) -> User:
    email = f"{name}-{uuid.uuid4().hex[:6]}@example.com"
    user_id = await identity_queries.insert_user(
        conn, email=email, first_name="Cluster", last_name=name
    )
    assert user_id is not None
    await identity_queries.mark_email_verified(conn, user_id)
    await identity_queries.set_password(conn, user_id=user_id, password_hash=password_hash)
    return User(str(user_id), email)


async def contested(
    conn: Any, settings: Any, size: Size, number: int, password_hash: str
) -> Contest:
    """An account on the team plan with `size.seats` seats: its owner, two admins (no other
    account: they sign in to this one) and the invitees (no account at all)."""
    staff = [await new_user(conn, f"staff{number}-{i}", password_hash) for i in range(STAFF)]
    account_id = await create_account(
        conn, settings, owner_id=uuid.UUID(staff[0].id), name=f"Contest {number}"
    )
    await account_queries.set_plan(conn, account_id=account_id, plan_code="team", seats=size.seats)
    for admin in staff[1:]:
        await account_queries.insert_membership(
            conn, account_id=account_id, user_id=uuid.UUID(admin.id), role="admin"
        )
    invitees = [
        await new_user(conn, f"invitee{number}-{i}", password_hash) for i in range(size.invitees)
    ]
    return Contest(str(account_id), staff, invitees)


async def drive(world: World, size: Size, nats: PrivateServer, pair: ReplicaPair) -> Result:
    started = time.monotonic()
    world.slots = [world.start(f"instance-{i}") for i in range(INSTANCES)]
    await asyncio.gather(*(s.ready(world.http, SERVE_WITHIN) for s in world.slots))
    db = await prepare(world, size)
    readers: list[Reader] = []
    tasks: list[asyncio.Task[None]] = []
    try:
        for number, user in enumerate(world.users):
            cookies = await sign_in(world, user, number)
            if cookies is None:
                raise RuntimeError(f"{user.email} could not sign in")
            user.access = cookies["auth_token"]
            readers.append(Reader(user, slot=number))
        tasks = [asyncio.create_task(r.run(world)) for r in readers]
        await readers_ready(world, readers)
        ready_s = time.monotonic() - started
        load_started = time.monotonic()
        await sign_in_contests(world)
        sessions = [asyncio.create_task(session_client(world, i)) for i in range(size.sessions)]
        sessions += [
            asyncio.create_task(contend(world, db, contest, i))
            for i, contest in enumerate(world.contests)
        ]
        load = asyncio.create_task(send_load(world, size))
        try:
            await faults(world, size, nats, pair)
            await load
        finally:
            world.load_done = True
            await asyncio.gather(*sessions, return_exceptions=True)
            load.cancel()
        load_s = time.monotonic() - load_started
        checks = await check_deliveries(db, world)
        checks += await check_streams(db, world, readers)
        checks += check_sessions(world)
        checks += contest_checks(world)
        checks += await check_invariants(db)
        with contextlib.suppress(RuntimeError):
            await until(lambda: pair.caught_up(), "the replica caught up")
        caught_up = await asyncio.to_thread(pair.caught_up)
        checks.append(Check("replica caught up after resume", str(caught_up), caught_up))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await db.close()
    figures = {
        "setup_s": round(ready_s, 1),
        "load_s": round(load_s, 1),
        "total_s": round(time.monotonic() - started, 1),
        "sends_per_s": round(len(world.accepted) / load_s, 1),
    }
    return Result(checks, world.faults, figures)


async def run_async(size: Size, root: Path, nats: PrivateServer, pair: ReplicaPair) -> Result:
    env = server_env(pair, nats, root)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        connector=connector, cookie_jar=aiohttp.DummyCookieJar()
    ) as http:
        world = World(root, env, http)
        try:
            return await drive(world, size, nats, pair)
        finally:
            await asyncio.gather(*(server.stop() for server in world.started))
            await nats.stop()


def run(size: Size, root: Path) -> Result:
    """Build everything under `root` (made afresh), drive the load and the faults, check,
    stop everything. The result's checks say what held."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    pair = ReplicaPair(root)
    nats = PrivateServer("nats", store=root / "nats", log=root / "nats.log")
    try:
        pair.build()
        asyncio.run(nats.start(WITHIN))
        return asyncio.run(run_async(size, root, nats, pair))
    finally:
        if nats.process is not None and nats.process.poll() is None:
            nats.process.kill()
        pair.stop()


def print_result(result: Result) -> None:
    print("| check | value | ok |")
    print("|---|---|---|")
    for check in result.checks:
        print(f"| {check.name} | {check.value} | {'yes' if check.ok else 'NO'} |")
    for fault in result.faults:
        print(f"- {fault}")
    print("- " + ", ".join(f"{k} {v}" for k, v in result.figures.items()))
    print("all checks hold" if result.ok else "FAILED")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="default")
    parser.add_argument("--dir", default=str(ROOT / "var" / "cluster"), help="made afresh")
    parser.add_argument("--json", default="", help="also write the result here")
    args = parser.parse_args()
    # SIGTERM as Ctrl-C: the servers, NATS and PostgreSQL are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    result = run(SIZES[args.size], Path(args.dir))
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(result), indent=2) + "\n")
    print_result(result)
    sys.exit(0 if result.ok else 1)


if __name__ == "__main__":
    main()
