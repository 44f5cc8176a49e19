"""Sending deliveries: Standard Webhooks signatures, retries, per-object order, disabling.

A delivery job names its delivery rows (fan-out: up to DELIVERIES_PER_JOB of one endpoint, in
event order; a retry: one); each row's `job_id` says which job may act on it, so a job that
runs again after a crash (its completion was never written) sends only what is still open, and
a stale job whose rows moved on to a retry job does nothing. Within a
batch, deliveries of one (endpoint, subject) go one after the other in event order, and one
that fails holds back the later ones; a delivery whose earlier sibling is open outside the
batch waits (a new job at that sibling's next attempt time), so per object the receiver sees
events in the order they happened, across retries and across instances.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
import random
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

import aiohttp
import orjson
from standardwebhooks.webhooks import Webhook

from tenantd.db import Conn, Database, Row
from tenantd.jobs.kinds import JobInfo, JobKind
from tenantd.jobs.queue import enqueue_many
from tenantd.outbox import public_event
from tenantd.services import Services
from tenantd.settings import Settings
from tenantd.webhooks import queries
from tenantd.webhooks.addresses import (
    ForbiddenAddress,
    GuardedResolver,
    forbidden_ip,
    refusal,
    refuse_private,
)
from tenantd.webhooks.sealing import UndecryptableSecret, signing_secrets

log = logging.getLogger(__name__)

DELIVER = "webhooks.deliver"
RETRY_WINDOW_SECONDS = 3 * 86_400  # a delivery is retried for up to 3 days
DISABLE_AFTER_SECONDS = 5 * 86_400  # an endpoint failing this long is disabled
WAIT_MARGIN_SECONDS = 0.5  # a held-back delivery looks again this long after its blocker
MAX_ERROR = 500
# Deliveries one fan-out job carries: the queue's claim, lease and completion are paid once
# per job, not once per delivery.
DELIVERIES_PER_JOB = 32


class WebhookSender:
    """One HTTP session for every delivery of this process (keep-alive, no redirects,
    metadata addresses refused at connect time)."""

    def __init__(self, settings: Settings, *, resolver: Any = None):
        self.timeout = aiohttp.ClientTimeout(total=settings.webhook_timeout_seconds)
        self._resolver = resolver
        self.refuse_private = refuse_private(settings)
        self._session: aiohttp.ClientSession | None = None
        self._signers: dict[str, Webhook] = {}
        # Counters for /metrics and logs (this process).
        self.disabled_endpoints = 0
        self.sent = 0
        self.failed = 0

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                resolver=GuardedResolver(self._resolver, refuse_private=self.refuse_private),
                limit=256,
                ttl_dns_cache=10,
            )
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=self.timeout, trust_env=False
            )
        return self._session

    def signer(self, secret: str) -> Webhook:
        signer = self._signers.get(secret)
        if signer is None:
            if len(self._signers) > 1000:
                self._signers.clear()
            signer = self._signers[secret] = Webhook(secret)
        return signer

    def headers(self, msg_id: str, body: str, secrets: Sequence[str]) -> dict[str, str]:
        """Standard Webhooks headers; with a rotation under way, one signature per secret."""
        now = dt.datetime.now(dt.UTC)
        signatures = " ".join(self.signer(s).sign(msg_id, now, body) for s in secrets)
        return {
            "webhook-id": msg_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": signatures,
            "content-type": "application/json",
            "user-agent": "tenantd-webhooks",
        }

    async def send(self, url: str, msg_id: str, body: str, secrets: Sequence[str]) -> Outcome:
        host = _host(url)
        if forbidden_ip(host, refuse_private=self.refuse_private):
            return Outcome(False, None, refusal(host, self.refuse_private))
        headers = self.headers(msg_id, body, secrets)
        try:
            async with self.session().post(
                url, data=body.encode(), headers=headers, allow_redirects=False
            ) as response:
                await response.read()
                if 200 <= response.status < 300:
                    return Outcome(True, response.status, None)
                return Outcome(False, response.status, f"HTTP {response.status}")
        except ForbiddenAddress as error:
            return Outcome(False, None, str(error))
        except aiohttp.ClientConnectorError as error:
            cause = error.os_error
            if isinstance(cause, ForbiddenAddress):
                return Outcome(False, None, str(cause))
            return Outcome(False, None, f"connect: {error}"[:MAX_ERROR])
        except TimeoutError:
            return Outcome(False, None, "timeout")
        except (aiohttp.ClientError, OSError) as error:
            return Outcome(False, None, f"{type(error).__name__}: {error}"[:MAX_ERROR])

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


@functools.lru_cache(maxsize=4096)
def _host(url: str) -> str:
    return urlsplit(url).hostname or ""


@dataclass(frozen=True, slots=True)
class Outcome:
    ok: bool
    status: int | None
    error: str | None


class WebhookServices(Services, Protocol):
    @property
    def webhook_sender(self) -> WebhookSender: ...


def retry_delay(settings: Settings, attempts: int) -> float:
    """Exponential backoff with +-20% jitter: base, 2*base, 4*base, ... (attempts so far)."""
    base = settings.webhook_retry_base_seconds * (2 ** max(attempts - 1, 0))
    return base * random.uniform(0.8, 1.2)


def body_of(row: Row) -> str:
    return orjson.dumps(public_event(row)).decode()


@dataclass
class Settlement:
    delivered: list[tuple[int, int]] = field(default_factory=list)  # (id, status code)
    failed: list[tuple[int, int | None, str, bool, float]] = field(default_factory=list)
    retry: list[tuple[int, float]] = field(default_factory=list)  # new job (id, delay)
    ok_endpoints: set[Any] = field(default_factory=set)
    bad_endpoints: set[Any] = field(default_factory=set)
    # Endpoints whose `failing_since` was set when the batch was loaded: a success clears it
    # (the others have nothing to clear).
    failing_endpoints: set[Any] = field(default_factory=set)

    def only_delivered(self) -> bool:
        """Every attempt succeeded, nothing to retry, no failing endpoint to clear."""
        return not (
            self.failed
            or self.retry
            or self.bad_endpoints
            or (self.ok_endpoints & self.failing_endpoints)
        )


async def run_deliveries(
    services: WebhookServices, items: list[tuple[JobInfo, dict[str, Any]]]
) -> list[BaseException | None]:
    """The job kind's batch: send, then settle every row in one transaction."""
    sender = services.webhook_sender
    settings = services.settings
    job_of = {delivery: info.id for info, payload in items for delivery in deliveries_of(payload)}
    async with services.db.connection() as conn:
        rows = await conn.fetch_all(queries.LOAD_DELIVERIES, {"ids": list(job_of)})
    live = [r for r in rows if r["status"] == "pending" and r["job_id"] == job_of[r["id"]]]
    outcome = Settlement()
    if live:
        disabled = [r["id"] for r in live if r["disabled_at"] is not None]
        groups: dict[tuple[Any, str], list[Row]] = defaultdict(list)
        now = time.time()
        for row in sorted(live, key=lambda r: r["seq"]):
            if row["disabled_at"] is not None:
                continue
            if row["endpoint_failing"]:
                outcome.failing_endpoints.add(row["endpoint_id"])
            until = row["blocked_until"]
            if until is not None:
                wait = max(until.timestamp() - now, 0.0) + WAIT_MARGIN_SECONDS
                outcome.retry.append((row["id"], wait))
                continue
            groups[(row["endpoint_id"], row["subject"])].append(row)
        await asyncio.gather(
            *(_send_group(sender, settings, group, outcome) for group in groups.values())
        )
        if not disabled and outcome.only_delivered():
            # The common case is one statement, atomic on its own: no transaction round trips.
            await _settle_delivered(services.db, outcome)
        else:
            async with services.db.transaction() as conn:
                if disabled:
                    await conn.execute(queries.FAIL_DISABLED, {"ids": disabled})
                await _settle(services, conn, outcome)
    return [None] * len(items)


async def _send_group(
    sender: WebhookSender, settings: Settings, rows: list[Row], outcome: Settlement
) -> None:
    """One object's deliveries to one endpoint, in order; a failure holds back the rest."""
    for index, row in enumerate(rows):
        try:
            secrets = signing_secrets(settings, row)
        except UndecryptableSecret:
            result = Outcome(False, None, "the signing secret does not open with this SECRET_KEY")
        else:
            result = await sender.send(row["url"], row["event_id"], body_of(row), secrets)
        if result.ok:
            sender.sent += 1
            outcome.delivered.append((row["id"], result.status or 0))
            outcome.ok_endpoints.add(row["endpoint_id"])
            continue
        sender.failed += 1
        outcome.bad_endpoints.add(row["endpoint_id"])
        attempts = row["attempts"] + 1
        delay = retry_delay(settings, attempts)
        first = row["first_attempt_at"]
        elapsed = 0.0 if first is None else time.time() - first.timestamp()
        final = elapsed + delay > RETRY_WINDOW_SECONDS
        outcome.failed.append((row["id"], result.status, result.error or "", final, delay))
        if not final:
            outcome.retry.append((row["id"], delay))
        for later in rows[index + 1 :]:
            outcome.retry.append((later["id"], delay + WAIT_MARGIN_SECONDS))
        log.info(
            "webhook delivery failed",
            extra={"delivery": row["id"], "endpoint": str(row["endpoint_id"]), "final": final},
        )
        return


async def _settle_delivered(db: Conn | Database, outcome: Settlement) -> None:
    if outcome.delivered:
        ids, codes = zip(*outcome.delivered, strict=True)
        await db.execute(queries.SETTLE_DELIVERED, {"ids": list(ids), "codes": list(codes)})


async def _settle(services: WebhookServices, conn: Conn, outcome: Settlement) -> None:
    await _settle_delivered(conn, outcome)
    if outcome.failed:
        ids, codes, errors, finals, delays = zip(*outcome.failed, strict=True)
        await conn.execute(
            queries.SETTLE_FAILED,
            {
                "ids": list(ids),
                "codes": list(codes),
                "errors": list(errors),
                "finals": list(finals),
                "delays": list(delays),
            },
        )
    deferred = [(i, d) for i, d in outcome.retry if i not in {f[0] for f in outcome.failed}]
    if deferred:
        await conn.execute(
            queries.DEFER,
            {"ids": [i for i, _ in deferred], "delays": [d for _, d in deferred]},
        )
    if outcome.retry:
        await schedule(services, conn, outcome.retry)
    ok = (outcome.ok_endpoints & outcome.failing_endpoints) - outcome.bad_endpoints
    if ok:
        await conn.execute(queries.ENDPOINTS_SUCCEEDED, {"ids": list(ok)})
    if outcome.bad_endpoints:
        rows = await conn.fetch_all(
            queries.ENDPOINTS_FAILED,
            {"ids": list(outcome.bad_endpoints), "after": DISABLE_AFTER_SECONDS},
        )
        for row in rows:
            if row["disabled_at"] is not None:
                services.webhook_sender.disabled_endpoints += 1
                log.error(
                    "webhooks.endpoint_disabled",
                    extra={
                        "endpoint": str(row["id"]),
                        "failing_since": row["failing_since"].isoformat(),
                    },
                )


def deliveries_of(payload: dict[str, Any]) -> list[int]:
    """The delivery ids a job payload names (`delivery`: jobs written before batching)."""
    if "deliveries" in payload:
        return [int(delivery) for delivery in payload["deliveries"]]
    return [int(payload["delivery"])]


async def enqueue_deliveries(
    services: WebhookServices, conn: Conn, batches: Sequence[Sequence[int]], delays: list[float]
) -> list[int]:
    """One job per batch of delivery ids (with its delay), in the caller's transaction."""
    return await enqueue_many(
        conn,
        DELIVER_KIND,
        [{"deliveries": list(batch)} for batch in batches],
        delays=delays,
        queue=services.jobs,
    )


async def schedule(
    services: WebhookServices, conn: Conn, deliveries: Sequence[tuple[int, float]]
) -> None:
    """A new job for each existing (delivery, delay) (a retry, a held-back delivery, the test
    event), recorded as the one job allowed to act on it."""
    if not deliveries:
        return
    ids = [delivery for delivery, _ in deliveries]
    jobs = await enqueue_deliveries(
        services, conn, [[delivery] for delivery in ids], [delay for _, delay in deliveries]
    )
    await conn.execute(queries.SET_JOBS, {"ids": ids, "jobs": jobs})


async def _run_one(services: WebhookServices, payload: dict[str, Any], info: JobInfo) -> None:
    await run_deliveries(services, [(info, payload)])


DELIVER_KIND = JobKind(
    name=DELIVER,
    run=_run_one,
    run_batch=run_deliveries,
    batch_size=8,  # jobs (up to 8 x DELIVERIES_PER_JOB deliveries) settled in one transaction
    max_attempts=1000,  # failures are handled per delivery; a job only fails on a crash
    timeout=60.0,
    durable=True,
)
