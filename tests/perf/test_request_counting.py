"""What the middleware keeps per request without locks (issue 19): requests in progress read
at scrape time, and request ids unique without a random draw per request."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tenantd.ops.metrics import METRICS, Metrics
from tenantd.web.middlewares import request_middleware


def in_progress(metrics: Metrics) -> float:
    text = generate_latest(metrics.registry).decode()
    for family in text_string_to_metric_families(text):
        if family.name == "tenantd_http_requests_in_progress":
            return float(family.samples[0].value)
    raise AssertionError("no in-progress gauge")


async def test_in_progress_counts_open_requests(aiohttp_client: Any) -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        entered.set()
        await release.wait()
        return web.Response(text="done")

    async def failing(request: web.Request) -> web.Response:
        raise RuntimeError("boom")

    app = web.Application(middlewares=[request_middleware])
    metrics = Metrics()
    app[METRICS] = metrics
    app.router.add_get("/slow", slow)
    app.router.add_get("/failing", failing)
    client = await aiohttp_client(app)
    assert in_progress(metrics) == 0
    pending = asyncio.ensure_future(client.get("/slow"))
    await entered.wait()
    assert in_progress(metrics) == 1
    release.set()
    assert (await pending).status == 200
    assert (await client.get("/failing")).status == 500
    assert (await client.get("/missing")).status == 404
    assert in_progress(metrics) == 0


async def test_generated_request_ids_are_unique_hex(aiohttp_client: Any) -> None:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="hi")

    app = web.Application(middlewares=[request_middleware])
    app.router.add_get("/", hello)
    client = await aiohttp_client(app)
    ids = [(await client.get("/")).headers["X-Request-ID"] for _ in range(50)]
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    echoed = await client.get("/", headers={"X-Request-ID": "abc-123"})
    assert echoed.headers["X-Request-ID"] == "abc-123"
