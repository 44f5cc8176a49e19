"""Real `tenantd serve` processes for the multi-instance and shutdown tests, and fresh
databases for them (created on the same PostgreSQL server as the test database)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import psycopg2

from bench.private_servers import free_port
from tenantd.db.dsn import url_to_dsn
from tests.helpers import ORIGIN

TENANTD = str(Path(sys.executable).with_name("tenantd"))
REPO = Path(__file__).resolve().parents[2]


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


def _admin(url: str, statement: str) -> None:
    conn = psycopg2.connect(url_to_dsn(url))
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(statement)
    finally:
        conn.close()


@contextlib.contextmanager
def fresh_database(url: str, name: str | None = None) -> Iterator[str]:
    """An empty database next to the one at `url` (named `name`, or a new name); dropped
    afterwards, and before (a killed run may have left one of that name)."""
    name = name or f"tenantd_t_{uuid.uuid4().hex[:12]}"
    _admin(url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    _admin(url, f"CREATE DATABASE {name}")
    try:
        yield with_database(url, name)
    finally:
        _admin(url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@dataclass
class Server:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def terminate(self, sig: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout=timeout)


def process_env(env: dict[str, str]) -> dict[str, str]:
    """The whole environment of a spawned tenantd: `env`, PATH, and this checkout's package
    first on the path, whatever the shared venv's editable install points at (another
    checkout: a server of that code would answer for this one)."""
    return {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONUNBUFFERED": "1",
        "TENANTD_ENV_FILE": "",  # not the host's /etc/tenantd/tenantd.env
        "PYTHONPATH": str(REPO),
        **env,
    }


def start_server(name: str, env: dict[str, str], directory: Path, *extra_args: str) -> Server:
    port = free_port()
    log_path = directory / f"{name}.log"
    handle = log_path.open("wb")
    process = subprocess.Popen(
        [TENANTD, "serve", "--host", "127.0.0.1", "--port", str(port), *extra_args],
        env=process_env(env),
        stdout=handle,
        stderr=subprocess.STDOUT,
        cwd=directory,
    )
    handle.close()
    return Server(name, port, process, log_path)


async def wait_ready(server: Server, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                raise AssertionError(f"{server.name} exited early:\n{server.log()}")
            try:
                async with session.get(server.url + "/readyz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError(f"{server.name} not ready in {limit}s:\n{server.log()}")


@contextlib.asynccontextmanager
async def running(servers: list[Server]) -> AsyncIterator[list[Server]]:
    """Wait until every server is ready; SIGTERM (then SIGKILL) whatever is left at the end.
    A server still running when the block ends must then shut down cleanly (status 0, before
    its watchdog's bound): what held a shutdown fails the test that caused it."""
    left: list[Server] = []
    try:
        await asyncio.gather(*(wait_ready(server) for server in servers))
        yield servers
    finally:
        left = [server for server in servers if server.process.poll() is None]
        for server in left:
            server.terminate()
        for server in left:
            try:
                await asyncio.to_thread(server.wait, 40)
            except subprocess.TimeoutExpired:
                server.process.kill()
                await asyncio.to_thread(server.wait, 5)
    unclean = [(s.name, s.process.returncode) for s in left if s.process.returncode != 0]
    assert not unclean, f"not a clean shutdown on SIGTERM: {unclean}\n" + "\n".join(
        s.log()[-3000:] for s in left if s.process.returncode != 0
    )


def server_env(database_url: str, data_dir: Path, secret: str, **extra: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "SECRET_KEY": secret,
        "TENANTD_DATA_DIR": str(data_dir),
        "PUBLIC_BASE_URL": ORIGIN,
        "COOKIE_SECURE": "false",
        "EMAIL_PROVIDER": "file",
        "EMAIL_FILE_DIR": str(data_dir / "mail"),
        "LOG_LEVEL": "info",
        **extra,
    }


async def read_sse(
    response: aiohttp.ClientResponse, count: int, *, limit: float = 30.0
) -> list[dict[str, Any]]:
    """Read SSE frames until `count` data frames arrived (comments are skipped)."""
    frames: list[dict[str, Any]] = []
    buffer = b""
    async with asyncio.timeout(limit):
        while len(frames) < count:
            chunk = await response.content.readany()
            if not chunk:
                raise AssertionError(f"stream ended after {len(frames)} frame(s)")
            buffer += chunk
            while b"\n\n" in buffer:
                block, buffer = buffer.split(b"\n\n", 1)
                data = [
                    line[5:].strip() for line in block.split(b"\n") if line.startswith(b"data:")
                ]
                if data:
                    frames.append(json.loads(b"\n".join(data)))
    return frames
