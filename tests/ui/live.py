"""A real `tenantd serve` process and Debian's Chromium for the browser tests, and the small
steps they share (read an emailed link, sign up through the pages, take screenshots)."""

from __future__ import annotations

import email
import email.policy
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psycopg2

from tenantd.db.dsn import url_to_dsn
from tenantd.ops.instances import STALE_AFTER_BEATS
from tests.helpers import PASSWORD, SECRET

REPO_ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
MISSING_CHROMIUM = "Chromium is missing at /usr/bin/chromium: apt-get install chromium"
EVENT_MODULE = "tests.notifications.events_fixture"
WAIT = 30.0  # seconds: generous, the machine is shared
# A short heartbeat: the row of a server that ended without its goodbye (killed after the
# stop's wait) goes stale within three of them, and the next test's `notify send` does not
# take it for a running deployment with another configuration.
HEARTBEAT = "0.5"
STOP_WAIT_SECONDS = 40.0  # TENANTD_SHUTDOWN_TIMEOUT_SECONDS (25) and a margin
LIVE_ROWS = f"""
SELECT count(*) FROM instances
WHERE host = %s AND pid = %s
  AND heartbeat_at >= now() - make_interval(secs => {STALE_AFTER_BEATS} * heartbeat_seconds)
"""
DESKTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def screenshots_dir() -> Path:
    path = Path(os.environ.get("TENANTD_SCREENSHOTS_DIR", REPO_ROOT / "var" / "screenshots"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class LiveServer:
    """`tenantd serve` in its own process on a free port (pages on, SSE on)."""

    base: str
    env: dict[str, str]
    mail_dir: Path
    process: subprocess.Popen[bytes]
    log_path: Path
    extra: dict[str, Any] = field(default_factory=dict)

    def url(self, path: str) -> str:
        return self.base + path

    def api(
        self, method: str, path: str, body: Any = None, cookies: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        """Call the API as another client (e.g. the same user on another device)."""
        headers = {"Origin": self.base, "Content-Type": "application/json"}
        if cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.base + path, data=data, method=method, headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=WAIT) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    def cli(self, *args: str) -> str:
        """Run the tenantd CLI against this server's database; its stdout."""
        result = subprocess.run(
            [sys.executable, "-m", "tenantd", *args],
            cwd=REPO_ROOT,
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    def mail_to(self, address: str, contains: str, *, seen: int = 0) -> str:
        """The first link containing `contains` in a mail to `address` beyond the `seen`th."""
        deadline = time.monotonic() + WAIT
        pattern = re.compile(
            re.escape(self.base) + r"[^\s\"'<>]*" + re.escape(contains) + r"[^\s\"'<>]*"
        )
        while True:
            links: list[str] = []
            for path in sorted(self.mail_dir.glob("*.eml"), key=lambda p: p.stat().st_mtime):
                message = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
                if address.lower() not in str(message["To"]).lower():
                    continue
                body = message.get_body(preferencelist=("plain", "html"))
                text = body.get_content() if body is not None else ""
                found = pattern.search(text)
                if found:
                    links.append(found.group(0).replace("&amp;", "&"))
            if len(links) > seen:
                return links[seen]
            if time.monotonic() > deadline:
                raise AssertionError(f"no mail to {address} with {contains!r}")
            time.sleep(0.1)

    def log_tail(self, size: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-size:]

    def stop(self) -> None:
        """End the server, then wait until its row of `instances` no longer counts as a
        running instance (deleted by its clean shutdown, or stale when it had to be killed):
        the next server on this database is then the only one `notify send` follows."""
        self.process.terminate()
        try:
            # Longer than the shutdown's own bound: past it the watchdog exits with status 1.
            status = self.process.wait(timeout=STOP_WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=20)
            status = None
        # A clean shutdown, as systemd's stop expects: an open stream or a stuck task that
        # held it until the watchdog fails the test that left it.
        assert status == 0, f"{self.base} exited {status} on SIGTERM:\n{self.log_tail()}"
        deadline = time.monotonic() + WAIT
        conn = psycopg2.connect(url_to_dsn(self.env["DATABASE_URL"]))
        try:
            conn.autocommit = True
            while True:
                with conn.cursor() as cur:
                    cur.execute(LIVE_ROWS, (socket.gethostname(), self.process.pid))
                    row = cur.fetchone()
                if row is None or row[0] == 0:
                    return
                if time.monotonic() > deadline:
                    raise AssertionError(f"the row of the stopped server {self.base} stays live")
                time.sleep(0.1)
        finally:
            conn.close()


def start_server(
    database_url: str, tmp: Path, *, port: int | None = None, **extra_env: str
) -> LiveServer:
    port = port or free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        "DATABASE_URL": database_url,
        "TENANTD_DATA_DIR": str(tmp),
        "SECRET_KEY": SECRET,
        "PUBLIC_BASE_URL": base,
        "COOKIE_SECURE": "false",
        "EMAIL_PROVIDER": "file",
        "EMAIL_FILE_DIR": str(tmp / "mail"),
        "LOG_LEVEL": "warning",
        "TENANTD_SCHEDULER_ENABLED": "false",
        "NOTIFICATIONS_SSE_ENABLED": "true",
        "TENANTD_SSE_TICK_SECONDS": "0.3",
        "TENANTD_EVENT_MODULES": EVENT_MODULE,
        "RATE_LIMIT_ENABLED": "false",
        "TENANTD_INSTANCE_HEARTBEAT_SECONDS": HEARTBEAT,
        "PYTHONPATH": str(REPO_ROOT),
        **extra_env,
    }
    log_path = tmp / "serve.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tenantd",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--no-migrate",
            ],
            cwd=REPO_ROOT,
            env={**os.environ, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = LiveServer(
        base=base, env=env, mail_dir=tmp / "mail", process=process, log_path=log_path
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=2) as response:
                if response.status == 200:
                    return server
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise AssertionError("tenantd serve did not start:\n" + log_path.read_text()[-3000:])
        time.sleep(0.1)


def unique_email(prefix: str = "user") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}@example.com"


def sign_up(page: Any, server: LiveServer, address: str, password: str = PASSWORD) -> None:
    """Sign up through the pages and follow the emailed link: the page lands signed in."""
    page.goto(server.url("/signup"))
    page.get_by_label("Email").fill(address)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign up").click()
    page.wait_for_url("**/check-inbox**")
    link = server.mail_to(address, "/verify-email?token=")
    page.goto(link)
    page.wait_for_url("**/notifications**")


def shoot(page: Any, name: str) -> None:
    """Screenshots of the current page at desktop and phone width (the run's artefacts)."""
    folder = screenshots_dir()
    size = page.viewport_size
    for label, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
        page.set_viewport_size(viewport)
        page.screenshot(path=str(folder / f"{name}-{label}.png"), full_page=True)
    if size:
        page.set_viewport_size(size)


def cookies_of(context: Any) -> dict[str, str]:
    return {c["name"]: c["value"] for c in context.cookies()}


SIBLING_DOMAIN = "example.test"  # Chromium maps *.example.test to 127.0.0.1


@contextmanager
def sibling_server(migrated: str, directory: Path, app_port: int) -> Iterator[LiveServer]:
    """tenantd at auth.example.test, serving an app at app.example.test:`app_port` (sibling
    subdomains: CORS for the app's origin, the access cookie on the parent domain)."""
    port = free_port()
    public = f"http://auth.{SIBLING_DOMAIN}:{port}"
    server = start_server(
        migrated,
        directory,
        port=port,
        PUBLIC_BASE_URL=public,
        ALLOWED_ORIGINS=f"{public},http://app.{SIBLING_DOMAIN}:{app_port}",
        SESSION_COOKIE_DOMAIN=SIBLING_DOMAIN,
    )
    try:
        yield replace(server, base=public)  # links in mails name the public URL
    finally:
        server.stop()
