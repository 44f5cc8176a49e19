"""Sending deliveries: Standard Webhooks signatures, retries, per-object order, disabling.

A delivery job names its delivery rows (fan-out: up to DELIVERIES_PER_JOB of one endpoint, in
event order; a retry: one); each row's `job_id` says which job may act on it, so a job that
runs again after a crash (its completion was never written) sends only what is still open, and
a stale job whose rows moved on to another job does nothing.

Within a batch, deliveries of one (endpoint, subject) go one after the other in event order;
each is recorded delivered as soon as its receiver answered (group commit across the batch's
objects), before the next one of its object goes, so a crash repeats at most the deliveries in
flight. A delivery starts only if its whole request timeout fits in the batch's send budget;
the rest go to a new job. One that fails holds back the later ones. A delivery whose earlier
sibling is open outside the batch is parked (pending, no job) and is handed over to a new job
by whatever settles that sibling (sql/0240): waiting costs no job and no polling, and per
object the receiver sees events in the order they happened, across retries and instances.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from tenantd.db import Conn, Row
from tenantd.jobs.kinds import JobInfo, JobKind
from tenantd.outbox import public_event
from tenantd.settings import Settings
from tenantd.webhooks import queries
from tenantd.webhooks.domain import Webhooks
from tenantd.webhooks.sealing import UndecryptableSecret, signing_secrets
from tenantd.webhooks.sender import Outcome, WebhookSender
from tenantd.webhooks.settings import WebhookSettings

log = logging.getLogger(__name__)

DELIVER = "webhooks.deliver"
RETRY_WINDOW_SECONDS = 3 * 86_400  # a delivery is retried for up to 3 days
DISABLE_AFTER_SECONDS = 5 * 86_400  # an endpoint failing this long is disabled
# A batch's time: no delivery starts unless its whole request timeout fits in the send
# budget (SEND_BUDGET_SECONDS, tenantd.webhooks.sender), and the settle after the sends has
# the rest of the job's timeout.
JOB_TIMEOUT_SECONDS = 60.0
MAX_ATTEMPTS = 1000
# Deliveries one fan-out job carries: the queue's claim, lease and completion are paid once
# per job, not once per delivery.
DELIVERIES_PER_JOB = 32


def retry_delay(settings: Settings, attempts: int) -> float:
    """Exponential backoff with +-20% jitter: base, 2*base, 4*base, ... (attempts so far)."""
    base = settings.section(WebhookSettings).webhook_retry_base_seconds * (
        2 ** max(attempts - 1, 0)
    )
    return base * random.uniform(0.8, 1.2)


def body_of(row: Row) -> str:
    return orjson.dumps(public_event(row)).decode()


@dataclass
class Settlement:
    """What a batch leaves to settle after its sends (deliveries were recorded as they
    succeeded)."""

    failed: list[tuple[int, int | None, str, bool, float]] = field(default_factory=list)
    retry: list[tuple[int, float]] = field(default_factory=list)  # new job (id, delay)
    held: list[int] = field(default_factory=list)  # behind a failure: parked
    leftover: list[list[int]] = field(default_factory=list)  # not sent in budget: a new job
    ok_endpoints: set[Any] = field(default_factory=set)
    bad_endpoints: set[Any] = field(default_factory=set)
    # Endpoints whose `failing_since` was set when the batch was loaded: a success clears it
    # (the others have nothing to clear).
    failing_endpoints: set[Any] = field(default_factory=set)

    def rows(self) -> list[int]:
        """The deliveries the settle changes (the retried ones are among the failed)."""
        leftover = [delivery for batch in self.leftover for delivery in batch]
        return [failed[0] for failed in self.failed] + self.held + leftover

    def nothing_left(self) -> bool:
        """Every attempt succeeded, nothing to retry, no failing endpoint to clear."""
        return not (
            self.failed
            or self.retry
            or self.held
            or self.leftover
            or self.bad_endpoints
            or (self.ok_endpoints & self.failing_endpoints)
        )


class Recorder:
    """Group commit of successful deliveries: each success is recorded (and its object's
    parked successors handed over) before its group sends the next one; successes of other
    groups that arrive while a statement is in flight share the next one."""

    def __init__(self, services: Webhooks):
        self.services = services
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None

    async def delivered(self, delivery: int, code: int) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((delivery, code, future))
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._flush())
        await future

    async def _flush(self) -> None:
        try:
            while self._waiting:
                wave, self._waiting = self._waiting, []
                try:
                    made = await self.services.db.fetch_val(
                        queries.RECORD_DELIVERED,
                        {
                            "ids": [w[0] for w in wave],
                            "codes": [w[1] for w in wave],
                            **_hand_over_params(),
                        },
                    )
                except Exception as error:
                    for _, _, future in wave:
                        if not future.done():
                            future.set_exception(error)
                    continue
                if made:
                    self.services.jobs.wake()
                for _, _, future in wave:
                    if not future.done():
                        future.set_result(None)
        finally:
            self._task = None


def _hand_over_params() -> dict[str, Any]:
    return {"kind": DELIVER, "max_attempts": MAX_ATTEMPTS, "chunk": DELIVERIES_PER_JOB}


async def run_deliveries(
    services: Webhooks, items: list[tuple[JobInfo, dict[str, Any]]]
) -> list[BaseException | None]:
    """The job kind's batch: park what an earlier open delivery holds back, send the rest
    (each recorded as it succeeds, none started past the batch's budget), then settle."""
    sender = services.sender
    deadline = asyncio.get_running_loop().time() + sender.send_budget
    settings = services.settings
    job_of = {delivery: info.id for info, payload in items for delivery in deliveries_of(payload)}
    async with services.db.connection() as conn:
        rows = await conn.fetch_all(queries.LOAD_DELIVERIES, {"ids": list(job_of)})
    live = [r for r in rows if r["status"] == "pending" and r["job_id"] == job_of[r["id"]]]
    if not live:
        return [None] * len(items)
    outcome = Settlement()
    disabled = [r["id"] for r in live if r["disabled_at"] is not None]
    ready = [r for r in live if r["disabled_at"] is None and not r["blocked"]]
    blocked = [r for r in live if r["disabled_at"] is None and r["blocked"]]
    if blocked:
        ready += await _park(services, blocked, job_of)
    groups: dict[tuple[Any, str], list[Row]] = defaultdict(list)
    for row in sorted(ready, key=lambda r: r["seq"]):
        if row["endpoint_failing"]:
            outcome.failing_endpoints.add(row["endpoint_id"])
        groups[(row["endpoint_id"], row["subject"])].append(row)
    recorder = Recorder(services)
    results = await asyncio.gather(
        *(
            _send_group(sender, settings, recorder, group, outcome, deadline)
            for group in groups.values()
        ),
        return_exceptions=True,
    )
    if disabled or not outcome.nothing_left():
        async with services.db.transaction() as conn:
            settling = outcome.rows() + disabled
            if settling:
                await conn.execute(queries.LOCK_SETTLING, {"ids": settling})
            if disabled:
                await conn.execute(queries.FAIL_DISABLED, {"ids": disabled})
                await conn.fetch_val(queries.HAND_OVER, {"ids": disabled, **_hand_over_params()})
            await _settle(services, conn, outcome)
    for result in results:
        if isinstance(result, BaseException):
            # A success could not be recorded (the database went away): the job runs again
            # and sends what is still open (the one unrecorded delivery of each group again).
            raise result
    return [None] * len(items)


async def _park(services: Webhooks, blocked: list[Row], job_of: dict[int, int | None]) -> list[Row]:
    """Park deliveries an earlier open delivery of their object holds back (no job polls for
    them: whatever settles that one hands them over); the ones whose blockers settled
    meanwhile come back to be sent now."""
    ids = [r["id"] for r in blocked]
    async with services.db.transaction() as conn:
        await conn.execute(queries.PARK, {"ids": ids})
        # Waits for a settle in progress (its hand-over did not see these rows parked).
        still = await conn.fetch_all(queries.BLOCKERS, {"ids": ids, "batch": list(job_of)})
        waiting = {r["waiter"] for r in still}
        free = [i for i in ids if i not in waiting]
        if free:
            await conn.execute(queries.UNPARK, {"ids": free, "jobs": [job_of[i] for i in free]})
    back = set(free)
    return [r for r in blocked if r["id"] in back]


async def _send_group(
    sender: WebhookSender,
    settings: Settings,
    recorder: Recorder,
    rows: list[Row],
    outcome: Settlement,
    deadline: float,
) -> None:
    """One object's deliveries to one endpoint, in order, each recorded as it succeeds; a
    failure holds back the rest; none starts unless its full timeout fits the budget."""
    loop = asyncio.get_running_loop()
    for index, row in enumerate(rows):
        if loop.time() + sender.request_seconds > deadline:
            rest = [later["id"] for later in rows[index:]]
            outcome.leftover.extend(
                rest[start : start + DELIVERIES_PER_JOB]
                for start in range(0, len(rest), DELIVERIES_PER_JOB)
            )
            return
        try:
            secrets = signing_secrets(settings, row)
        except UndecryptableSecret:
            result = Outcome(False, None, "the signing secret does not open with this SECRET_KEY")
        else:
            result = await sender.send(row["url"], row["event_id"], body_of(row), secrets)
        if result.ok:
            sender.sent += 1
            outcome.ok_endpoints.add(row["endpoint_id"])
            await recorder.delivered(row["id"], result.status or 0)
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
        outcome.held.extend(later["id"] for later in rows[index + 1 :])
        log.info(
            "webhook delivery failed",
            extra={"delivery": row["id"], "endpoint": str(row["endpoint_id"]), "final": final},
        )
        return


async def _settle(services: Webhooks, conn: Conn, outcome: Settlement) -> None:
    if outcome.held:
        # Parked behind their failed sibling, whose retry hands them over when it settles.
        await conn.execute(queries.PARK, {"ids": outcome.held})
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
        given_up = [i for i, final in zip(ids, finals, strict=True) if final]
        if given_up:
            await conn.fetch_val(queries.HAND_OVER, {"ids": given_up, **_hand_over_params()})
    if outcome.retry:
        await schedule(services, conn, outcome.retry)
    if outcome.leftover:
        jobs = await enqueue_deliveries(
            services, conn, outcome.leftover, [0.0] * len(outcome.leftover)
        )
        rest = [i for batch in outcome.leftover for i in batch]
        owners = [job for job, batch in zip(jobs, outcome.leftover, strict=True) for _ in batch]
        await conn.execute(queries.SET_JOBS, {"ids": rest, "jobs": owners})
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
                services.sender.disabled_endpoints += 1
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
    services: Webhooks, conn: Conn, batches: Sequence[Sequence[int]], delays: list[float]
) -> list[int]:
    """One job per batch of delivery ids (with its delay), in the caller's transaction."""
    ids = await services.jobs.enqueue(
        conn,
        DELIVER_KIND.name,
        *({"deliveries": list(batch)} for batch in batches),
        delay_seconds=delays,
    )
    return [job_id for job_id in ids if job_id is not None]  # a durable kind: every one


async def schedule(services: Webhooks, conn: Conn, deliveries: Sequence[tuple[int, float]]) -> None:
    """A new job for each existing (delivery, delay) (a retry, a held-back delivery, the test
    event), recorded as the one job allowed to act on it."""
    if not deliveries:
        return
    ids = [delivery for delivery, _ in deliveries]
    jobs = await enqueue_deliveries(
        services, conn, [[delivery] for delivery in ids], [delay for _, delay in deliveries]
    )
    await conn.execute(queries.SET_JOBS, {"ids": ids, "jobs": jobs})


async def _run_one(services: Webhooks, payload: dict[str, Any], info: JobInfo) -> None:
    await run_deliveries(services, [(info, payload)])


DELIVER_KIND = JobKind(
    name=DELIVER,
    run=_run_one,
    run_batch=run_deliveries,
    batch_size=8,  # jobs (up to 8 x DELIVERIES_PER_JOB deliveries) run together
    max_attempts=MAX_ATTEMPTS,  # failures are handled per delivery; a job only fails on a crash
    timeout=JOB_TIMEOUT_SECONDS,
    durable=True,
)
