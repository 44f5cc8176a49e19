"""docs/clients.md's server snippets (`client-node`, `client-python`), run as written against a
live `tenantd serve`: a token verified (and a forged one refused), a notification sent, the
events read through the cursor, and a real webhook delivery verified."""

from __future__ import annotations

import base64
import json
import os
import queue
import shutil
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.clients.conftest import Seeded
from tests.clients.test_python_client import sign_in
from tests.docs.snippets import snippet
from tests.ui.live import REPO_ROOT, WAIT

PLACEHOLDER = "https://auth.example.com"
Delivery = tuple[dict[str, str], bytes]


def api(seeded: Seeded, method: str, path: str, body: Any = None) -> Any:
    request = urllib.request.Request(
        seeded.server.url(path),
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {seeded.api_key}", "Content-Type": "application/json"},
        method=method,
    )
    with urllib.request.urlopen(request, timeout=WAIT) as response:
        return json.loads(response.read() or b"null")["data"]


@pytest.fixture(scope="module")
def delivery(seeded: Seeded) -> Iterator[tuple[str, Delivery]]:
    """A real webhook delivery (tenantd's test event) and its endpoint's secret."""
    received: queue.Queue[Delivery] = queue.Queue()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.put(({k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/hooks"
        created = api(seeded, "POST", "/api/v1/webhook-endpoints", {"url": url})
        api(seeded, "POST", f"/api/v1/webhook-endpoints/{created['endpoint']['id']}/test")
        yield created["secret"], received.get(timeout=WAIT)
    finally:
        server.shutdown()
        server.server_close()


DRIVER = """
import { currentUser, notifyComment, syncEvents, onWebhook } from "./app.mjs";
import { readFileSync } from "node:fs";

const token = process.env.ACCESS_TOKEN;
const user = await currentUser(token);
const forged = await currentUser(token.slice(0, -4) + "AAAA");
const comment = { id: "c_" + Date.now(), authorId: "6f1d2c3b", text: "Ship it" };
const sent = await notifyComment(user.userId, comment);
const again = await notifyComment(user.userId, comment);
const seen = [];
const cursor = await syncEvents(undefined, async (event) => { seen.push(event.type); });
const hook = JSON.parse(readFileSync("delivery.json", "utf8"));
const event = await onWebhook(hook.headers, Buffer.from(hook.body, "base64"));
let refused = null;
try { await onWebhook(hook.headers, Buffer.from("{}")); } catch (error) { refused = error.name; }
const answer = { user, forged, sent, again, seen, cursor, event: event.type, refused };
console.log(JSON.stringify(answer));
"""


def test_the_node_snippet_runs_as_written(
    seeded: Seeded, delivery: tuple[str, Delivery], tmp_path: Path
) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not on PATH: install Node.js 20 to run the manual's Node snippet")
    code = snippet("client-node").code
    assert PLACEHOLDER in code
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / "tenantd-client").symlink_to(REPO_ROOT / "clients" / "js")
    (tmp_path / "app.mjs").write_text(code.replace(PLACEHOLDER, seeded.server.base))
    (tmp_path / "main.mjs").write_text(DRIVER)
    secret, (headers, body) = delivery
    (tmp_path / "delivery.json").write_text(
        json.dumps({"headers": headers, "body": base64.b64encode(body).decode()})
    )
    token, user_id = sign_in(seeded)
    env = {
        **os.environ,
        "TENANTD_API_KEY": seeded.api_key,
        "TENANTD_WEBHOOK_SECRET": secret,
        "ACCESS_TOKEN": token,
    }
    result = subprocess.run(
        [node, "main.mjs"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["user"]["userId"] == user_id
    assert out["forged"] is None
    assert (
        out["sent"]["status"] in ("queued", "created") and out["again"]["id"] == out["sent"]["id"]
    )
    assert "user.created" in out["seen"] and out["cursor"]
    assert out["event"] == "webhook.test"
    assert out["refused"] == "WebhookVerificationError"


def test_the_python_snippet_runs_as_written(
    seeded: Seeded, delivery: tuple[str, Delivery], monkeypatch: pytest.MonkeyPatch
) -> None:
    code = snippet("client-python").code
    assert PLACEHOLDER in code
    secret, (headers, body) = delivery
    monkeypatch.setenv("TENANTD_API_KEY", seeded.api_key)
    monkeypatch.setenv("TENANTD_WEBHOOK_SECRET", secret)
    monkeypatch.syspath_prepend(str(REPO_ROOT / "clients" / "python"))
    scope: dict[str, Any] = {}
    exec(compile(code.replace(PLACEHOLDER, seeded.server.base), "clients.md", "exec"), scope)

    token, user_id = sign_in(seeded)
    assert scope["current_user"](token) == user_id
    assert scope["current_user"](token[:-4] + "AAAA") is None
    comment = {"id": f"c_{os.getpid()}", "authorId": "6f1d2c3b", "text": "Ship it"}
    first = scope["notify_comment"](user_id, comment)
    assert scope["notify_comment"](user_id, comment) == first
    seen: list[str] = []
    cursor = scope["sync_events"](None, lambda event: seen.append(event["type"]))
    assert "user.created" in seen and cursor
    assert scope["on_webhook"](headers, body)["type"] == "webhook.test"
    with pytest.raises(Exception, match="signature"):
        scope["on_webhook"](headers, b"{}")
