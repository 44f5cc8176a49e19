"""A local webhook receiver for the delivery figure: answers 204 to every POST and checks
one request in 100 with the `standardwebhooks` library (the secret comes in argv)."""

from __future__ import annotations

import sys

from aiohttp import web
from standardwebhooks.webhooks import Webhook


def main() -> None:
    port, secret = int(sys.argv[1]), sys.argv[2]
    verifier = Webhook(secret)
    seen = {"n": 0, "bad": 0}

    async def hook(request: web.Request) -> web.Response:
        body = await request.read()
        seen["n"] += 1
        if seen["n"] % 100 == 1:
            try:
                verifier.verify(body, dict(request.headers))
            except Exception:
                seen["bad"] += 1
                return web.Response(status=401)
        return web.Response(status=204)

    async def stats(request: web.Request) -> web.Response:
        return web.json_response(seen)

    app = web.Application()
    app.router.add_post("/hook", hook)
    app.router.add_get("/stats", stats)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


if __name__ == "__main__":
    main()
