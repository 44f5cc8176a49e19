"""Bare aiohttp hello-world: the framework limit every figure is compared against."""

from __future__ import annotations

import sys

from aiohttp import web


async def hello(request: web.Request) -> web.Response:
    return web.Response(text="Hello, world")


def main() -> None:
    app = web.Application()
    app.router.add_get("/", hello)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)


if __name__ == "__main__":
    main()
