"""The outbox relay of `tenantd serve` with the webhook fan-out as its consumer, and the
webhook figures of /metrics."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from tenantd.outbox import Consumer, Relay
from tenantd.outbox.settings import OutboxSettings
from tenantd.webhooks.domain import Webhooks
from tenantd.webhooks.fanout import fan_out
from tenantd.webhooks.sender import WebhookSender


class WebhookCollector(Collector):
    """This process's delivery outcomes and endpoints it disabled."""

    def __init__(self, sender: WebhookSender):
        self.sender = sender

    def collect(self) -> Iterator[Metric]:
        deliveries = CounterMetricFamily(
            "tenantd_webhook_deliveries",
            "Webhook delivery attempts by this instance, by outcome",
            labels=["outcome"],
        )
        deliveries.add_metric(["delivered"], float(self.sender.sent))
        deliveries.add_metric(["failed"], float(self.sender.failed))
        yield deliveries
        disabled = CounterMetricFamily(
            "tenantd_webhook_endpoints_disabled",
            "Webhook endpoints this instance disabled after failing for 5 days",
        )
        disabled.add_metric([], float(self.sender.disabled_endpoints))
        yield disabled


@contextlib.asynccontextmanager
async def relaying(services: Webhooks, others: Sequence[Consumer] = ()) -> AsyncIterator[Relay]:
    """Number committed events and fan them out to the endpoints (and to `others`, in the
    same transaction), until exit."""
    relay = Relay(
        services.db,
        [fan_out(services), *others],
        poll_seconds=services.settings.section(OutboxSettings).outbox_poll_seconds,
        # The fan-out's jobs are claimable once its transaction committed: wake the runner
        # then (a wake inside the transaction finds nothing and the runner sleeps a poll).
        committed=services.jobs.wake,
    )
    relay.start()
    try:
        yield relay
    finally:
        await relay.stop()
