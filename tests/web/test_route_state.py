"""What a route table's views keep per application is made when the table is registered
(`Routes(state=...)`): a started application is frozen, and two applications in one process
never share it."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tenantd.web.routing import register
from tenantd.web.spec import Access, Routes


class Counter:
    def __init__(self) -> None:
        self.hits = 0


COUNTER = web.AppKey("test_counter", Counter)


def _state(app: web.Application) -> None:
    app[COUNTER] = Counter()


counted = Routes("test", state=_state)


@counted.get("/test/count", access=Access.PUBLIC)
async def count(request: web.Request) -> dict[str, int]:
    counter = request.app[COUNTER]
    counter.hits += 1
    return {"hits": counter.hits}


async def _open(request: web.Request, access: Access) -> None:
    """No guard: the table's routes are public."""


def application() -> web.Application:
    app = web.Application()
    register(app, counted, guard=_open)
    return app


async def test_each_application_gets_its_own_state_at_registration(aiohttp_client: Any) -> None:
    first, second = application(), application()
    assert first[COUNTER] is not second[COUNTER]  # made by register, before any start-up
    one, other = await aiohttp_client(first), await aiohttp_client(second)
    for expected in (1, 2):
        response = await one.get("/test/count")
        assert response.status == 200
        assert (await response.json())["data"] == {"hits": expected}
    response = await other.get("/test/count")
    assert (await response.json())["data"] == {"hits": 1}  # the other app's own counter
