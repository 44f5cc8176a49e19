"""The bus on NATS (TENANTD_BUS=nats): one client connection per process; NATS core for
fan-out, JetStream for the channels whose consumers must not miss a message.

A channel is the core subject `tenantd.<channel>`: NATS fans a message out to every instance
subscribed at that moment (at most once: a subscriber that was disconnected misses it, and
its `on_gap` makes it catch up from PostgreSQL, as SSE does by the stream's last id).

The `durable` channels (the composition root names them: revocations and cache
invalidations, signing-key changes, event-type definitions) travel as `tenantd.durable.<channel>`
through the JetStream stream STREAM (file storage, messages kept STREAM_MAX_AGE_SECONDS). A
`publish` of one is queued and sent in order, each until the stream acknowledges it (retried
while the server is down, lost if the process ends first); the relay uses `publish_acked`
instead, which returns once the stream acknowledged (its row is deleted only then).
Each process follows the stream with one ephemeral consumer from
the message after the last one it saw (`_seen`); after a reconnect it follows again from
there, so whatever was published while it was cut off is delivered, and its subscribers hear
no gap. Only when the stream no longer holds that message (cut off for longer than the
stream keeps messages, or a new stream) do they hear `on_gap`.

The client reconnects by itself and subscribes again; if the server is down when the process
starts, a task keeps connecting. Every second a flush (PING/PONG on the subscriber connection)
and the stream's last sequence confirm that everything published before the round trip began
has been delivered (`confirmed_within`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Iterable

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription as NatsSubscription
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    StorageType,
    StreamConfig,
    StreamInfo,
)
from nats.js.errors import BadRequestError

from tenantd.pubsub.core import (
    FIRST_RETRY_SECONDS,
    BusCore,
)
from tenantd.pubsub.subscription import Subscription, tell_gap

log = logging.getLogger(__name__)

PREFIX = "tenantd."
DURABLE_PREFIX = "tenantd.durable."
STREAM = "TENANTD"
STREAM_MAX_AGE_SECONDS = 3600.0  # a process cut off for longer reloads its caches instead
STREAM_MAX_BYTES = 64 * 1024 * 1024
ACK_TIMEOUT_SECONDS = 2.0
CONSUMER_INACTIVE_SECONDS = 30.0  # the server removes a consumer nobody follows any more
PUBLISH_QUEUE = 10_000  # durable messages waiting for the stream's acknowledgement
PUBLISH_RETRY_MAX_SECONDS = 1.0
PUBLISH_BATCH = 256  # durable messages in flight at once
CONNECT_TIMEOUT_SECONDS = 2.0
RECONNECT_WAIT_SECONDS = 0.25
RECONNECT_MAX_SECONDS = 5.0


async def ensure_stream(js: JetStreamContext, max_age: float) -> StreamInfo:
    """Create the stream of the durable channels, or bring an existing one to these limits
    (instances starting together all call it: each call is idempotent)."""
    config = StreamConfig(
        name=STREAM,
        subjects=[DURABLE_PREFIX + ">"],
        max_age=max_age,
        max_bytes=STREAM_MAX_BYTES,
        storage=StorageType.FILE,
        discard=DiscardPolicy.OLD,
    )
    try:
        return await js.add_stream(config)
    except BadRequestError:  # it exists with other limits
        return await js.update_stream(config)


class NatsBus(BusCore):
    reconnect_max_seconds = RECONNECT_MAX_SECONDS

    def __init__(
        self,
        url: str,
        *,
        durable: Iterable[str] = (),
        stream_max_age: float = STREAM_MAX_AGE_SECONDS,
        **clock: float,  # ping_interval, ping_timeout: BusCore's
    ):
        super().__init__(**clock)
        self._url = url
        self.durable = frozenset(durable)
        self._stream_max_age = stream_max_age
        self._nc: Client | None = None
        self._subs: dict[str, NatsSubscription] = {}
        self._outbox: asyncio.Queue[tuple[str, str]] = asyncio.Queue(PUBLISH_QUEUE)
        self._unacknowledged = 0
        self._follower: JetStreamContext.PushSubscription | None = None
        self._seen: int | None = None  # the stream sequence of the last message delivered
        self._waiting: list[tuple[float, int]] = []  # (round trip began, stream's last then)

    async def start(self) -> None:
        if not await self._connect():
            self._spawn(self._connect_later())
        self._start_loops(self._health_loop(), self._publish_loop())

    async def _connect_later(self) -> None:
        await asyncio.sleep(RECONNECT_WAIT_SECONDS)
        await self._reconnect(self._connect)  # what was published before we connected is missed

    async def _connect(self) -> bool:
        """One connect (with the subscriptions); False when the server cannot be reached."""
        began = time.monotonic()
        try:
            nc = await nats.connect(
                servers=[self._url],
                connect_timeout=CONNECT_TIMEOUT_SECONDS,
                allow_reconnect=True,
                max_reconnect_attempts=-1,
                reconnect_time_wait=RECONNECT_WAIT_SECONDS,
                ping_interval=2,
                max_outstanding_pings=2,
                disconnected_cb=self._on_disconnected,
                reconnected_cb=self._on_reconnected,
                error_cb=self._on_error,
                name="tenantd",
            )
        except Exception as error:
            log.warning("bus connect failed; retrying", extra={"error": repr(error)})
            return False
        async with self._lock:
            self._nc = nc
            for channel in list(self._channels):
                await self._subscribe_subject(channel)
            await self._follow()
        if self._follower is not None or not self.durable:
            self._confirmed_at = began
        return True

    async def _on_disconnected(self) -> None:
        self._confirmed_at = None
        self._waiting.clear()
        if not self._closing:
            log.warning("bus connection lost; reconnecting")

    async def _on_reconnected(self) -> None:
        self.reconnects += 1
        log.info("bus reconnected", extra={"channels": len(self._channels)})
        self._tell_gap()  # the core channels; the durable ones resume from the stream
        self._spawn(self._follow_again())

    async def _on_error(self, error: Exception) -> None:
        if not self._closing:
            log.warning("bus error", extra={"error": repr(error)})

    async def close(self) -> None:
        await self._stop_tasks()
        nc, self._nc = self._nc, None
        if nc is not None:
            with contextlib.suppress(Exception):
                await nc.close()

    # Core subjects

    async def _channel_added(self, channel: str, *, first: bool) -> None:
        async with self._lock:
            if channel not in self._subs:
                await self._subscribe_subject(channel)

    async def _channel_removed(self, channel: str) -> None:
        async with self._lock:
            if channel in self._channels:
                return  # subscribed again meanwhile
            sub = self._subs.pop(channel, None)
            if sub is not None:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()

    async def _subscribe_subject(self, channel: str) -> None:
        nc = self._nc
        if channel in self.durable:
            return  # the stream's follower delivers it
        if nc is None or nc.is_closed:
            return  # the connect subscribes every channel

        async def deliver(msg: Msg) -> None:
            self._dispatch(channel, msg.data.decode())

        try:
            self._subs[channel] = await nc.subscribe(PREFIX + channel, cb=deliver)
        except Exception as error:  # while reconnecting the client queues it
            log.warning("bus subscribe failed", extra={"error": repr(error)})

    def _gap_channels(self) -> dict[str, set[Subscription]]:
        return {c: subs for c, subs in self._channels.items() if c not in self.durable}

    # The stream of the durable channels

    async def _follow_again(self) -> None:
        async with self._lock:
            await self._follow()

    async def _follow(self) -> None:
        """(Under the lock.) Follow the stream from the message after the last one delivered
        (from its end, the first time: what is older is in the database subscribers load)."""
        nc = self._nc
        if not self.durable or nc is None or nc.is_closed:
            return
        old, self._follower = self._follower, None
        if old is not None:
            with contextlib.suppress(Exception):
                await old.unsubscribe()
        try:
            js = nc.jetstream(timeout=ACK_TIMEOUT_SECONDS)
            state = (await ensure_stream(js, self._stream_max_age)).state
            config = ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=self._resume_at(state.first_seq, state.last_seq),
                ack_policy=AckPolicy.NONE,
                inactive_threshold=CONSUMER_INACTIVE_SECONDS,
                mem_storage=True,
                num_replicas=1,
            )
            self._follower = await js.subscribe(
                DURABLE_PREFIX + ">",
                cb=self._deliver_durable,
                stream=STREAM,
                config=config,
                manual_ack=True,
            )
        except Exception as error:
            log.warning("bus stream not followed; retrying", extra={"error": repr(error)})

    def _resume_at(self, first: int, last: int) -> int:
        """The stream sequence to follow from; a gap when the stream lost what we missed."""
        seen = self._seen
        if seen is None:  # the first follow: subscribers so far have heard nothing yet
            self._seen = last
            if any(channel in self.durable for channel in self._channels):
                self._tell_durable_gap()  # they subscribed before the server could be reached
            return last + 1
        if seen + 1 < first or seen > last:  # kept no longer, or a new stream
            log.warning("bus stream lost messages; subscribers reload", extra={"seen": seen})
            seen = self._seen = max(first, 1) - 1
            self._tell_durable_gap()
        return seen + 1

    def _tell_durable_gap(self) -> None:
        tell_gap({c: subs for c, subs in self._channels.items() if c in self.durable})

    async def _deliver_durable(self, msg: Msg) -> None:
        sequence = msg.metadata.sequence.stream
        seen = self._seen
        if seen is not None and sequence <= seen:
            return  # delivered already (followed again from an earlier message)
        if seen is not None and sequence > seen + 1:
            self._tell_durable_gap()  # the stream dropped some before they reached us
        self._seen = sequence
        self._dispatch(msg.subject[len(DURABLE_PREFIX) :], msg.data.decode())
        while self._waiting and self._waiting[0][1] <= sequence:
            self._confirmed_at = self._waiting.pop(0)[0]

    # Publishing

    def publish(self, channel: str, payload: str) -> None:
        if self._closing:
            return
        if channel in self.durable:
            try:
                self._outbox.put_nowait((channel, payload))
            except asyncio.QueueFull:
                log.error("bus publish queue full; message dropped", extra={"channel": channel})
                return
            self._unacknowledged += 1
            return
        nc = self._nc
        if nc is None or nc.is_closed:
            return  # down: the message is in the database; subscribers catch up on reconnect
        self._spawn(self._send(nc, channel, payload))

    async def publish_acked(self, channel: str, payload: str) -> None:
        """Bus.publish_acked: a durable channel's message once, returning when the stream
        acknowledged it; ConnectionError while disconnected, the client's error (a timeout
        after ACK_TIMEOUT_SECONDS) otherwise. The relay retries the whole batch. A core
        channel's message is published as by `publish`."""
        if channel not in self.durable:
            self.publish(channel, payload)
            return
        nc = self._nc
        if self._closing or nc is None or not nc.is_connected:
            raise ConnectionError("the NATS server is not connected")
        js = nc.jetstream(timeout=ACK_TIMEOUT_SECONDS)
        await js.publish(DURABLE_PREFIX + channel, payload.encode(), stream=STREAM)

    async def _send(self, nc: Client, channel: str, payload: str) -> None:
        try:
            await nc.publish(PREFIX + channel, payload.encode())
        except Exception as error:
            log.warning("bus publish failed", extra={"error": repr(error)})

    async def _publish_loop(self) -> None:
        """Send the durable messages in order, up to PUBLISH_BATCH in flight, each until the
        stream acknowledges it (its id lets the stream drop the copy of a retry whose first
        acknowledgement was lost)."""
        while not self._closing:
            batch = [await self._outbox.get()]
            while len(batch) < PUBLISH_BATCH and not self._outbox.empty():
                batch.append(self._outbox.get_nowait())
            await self._send_durable([(c, p, uuid.uuid4().hex) for c, p in batch])

    async def _send_durable(self, pending: list[tuple[str, str, str]]) -> None:
        delay = FIRST_RETRY_SECONDS
        while pending and not self._closing:
            nc = self._nc
            if nc is not None and nc.is_connected:
                js = nc.jetstream(timeout=ACK_TIMEOUT_SECONDS)
                results = await asyncio.gather(
                    *(
                        js.publish(
                            DURABLE_PREFIX + channel,
                            payload.encode(),
                            stream=STREAM,
                            headers={"Nats-Msg-Id": message_id},
                        )
                        for channel, payload, message_id in pending
                    ),
                    return_exceptions=True,
                )
                errors = [r for r in results if isinstance(r, BaseException)]
                failed = [m for m, r in zip(pending, results, strict=True) if r in errors]
                self._unacknowledged -= len(pending) - len(failed)
                if not failed:
                    return
                log.warning("bus publish unacknowledged", extra={"error": repr(errors[0])})
                pending = failed
            await asyncio.sleep(delay)
            delay = min(delay * 2, PUBLISH_RETRY_MAX_SECONDS)

    def unacknowledged(self) -> int:
        """Durable messages published here that the stream has not acknowledged yet."""
        return self._unacknowledged

    # Liveness

    async def _health_loop(self) -> None:
        while not self._closing:
            await asyncio.sleep(self._ping_interval)
            nc = self._nc
            if nc is None or not nc.is_connected:
                self._confirmed_at = None
                continue
            began = time.monotonic()
            try:
                await nc.flush(timeout=max(1, round(self._ping_timeout)))
                last = await self._stream_last(nc)
            except Exception as error:
                log.warning("bus round trip failed", extra={"error": repr(error)})
                self._confirmed_at = None
                continue
            if nc.is_connected:
                self._confirm(began, last)

    async def _stream_last(self, nc: Client) -> int | None:
        """The stream's last sequence now (None without durable channels)."""
        if not self.durable:
            return None
        if self._follower is None:
            await self._follow_again()
            if self._follower is None:
                raise RuntimeError("the stream is not followed")
        info = await nc.jetstream(timeout=self._ping_timeout).stream_info(STREAM)
        return info.state.last_seq

    def _confirm(self, began: float, last: int | None) -> None:
        """Confirmed once the follower has delivered everything the stream held at `began`;
        a follower that falls behind for longer than the round-trip timeout follows again."""
        seen = self._seen
        if last is None or (seen is not None and seen >= last):
            self._confirmed_at = began
            self._waiting.clear()
            return
        self._waiting.append((began, last))
        if began - self._waiting[0][0] > self._ping_timeout:
            log.warning("bus stream follower behind; following again")
            self._waiting.clear()
            self._spawn(self._follow_again())

    def is_connected(self) -> bool:
        nc = self._nc
        return nc is not None and nc.is_connected
