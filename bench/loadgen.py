"""Load drivers: wrk (with Lua for per-request cookies) when installed, else an aiohttp
closed-loop generator. Both report requests/s and p50/p99 latency in milliseconds."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

LUA = r"""
local tokens = {}
local counter = 0
local threads = 1
local cookie_name = os.getenv("BENCH_COOKIE") or "auth_token"
local path = os.getenv("BENCH_PATH") or "/"
local method = os.getenv("BENCH_METHOD") or "GET"
local origin = os.getenv("BENCH_ORIGIN") or "http://127.0.0.1:8080"
local once = os.getenv("BENCH_ONCE") == "1"
local bearer = os.getenv("BENCH_BEARER") == "1"  -- tokens as Authorization: Bearer (API keys)
-- tokens in a JSON body {"<field>": token} (introspection); an answer without "active":true
-- counts as an error
local body_field = os.getenv("BENCH_BODY_FIELD")
inactive = 0  -- a global: done() reads it from each thread
local next_id = 0

local all_threads = {}

function setup(thread)
  all_threads[#all_threads + 1] = thread
  thread:set("thread_id", next_id)
  next_id = next_id + 1
end

function init(args)
  thread_id = thread_id or 0  -- global set by setup() through thread:set
  local file = os.getenv("BENCH_TOKENS")
  if file then
    for line in io.lines(file) do tokens[#tokens + 1] = line end
  end
  threads = tonumber(os.getenv("BENCH_THREADS") or "1")
end

function request()
  local headers = {["Origin"] = origin}
  if #tokens > 0 then
    local index
    if once then
      -- each thread walks its own slice so a rotated token is never reused
      index = (thread_id + counter * threads) % #tokens + 1
    else
      index = counter % #tokens + 1
    end
    if body_field then
      headers["Content-Type"] = "application/json"
      counter = counter + 1
      return wrk.format(method, path, headers,
        '{"' .. body_field .. '": "' .. tokens[index] .. '"}')
    elseif bearer then
      headers["Authorization"] = "Bearer " .. tokens[index]
    else
      headers["Cookie"] = cookie_name .. "=" .. tokens[index]
    end
  end
  counter = counter + 1
  return wrk.format(method, path, headers)
end

if body_field then
  function response(status, headers, body)
    if status == 200 and not string.find(body, '"active":%s*true') then
      inactive = inactive + 1
    end
  end
end

function done(summary, latency, requests)
  local errors = summary.errors.connect + summary.errors.read + summary.errors.write
    + summary.errors.status + summary.errors.timeout
  for _, thread in ipairs(all_threads) do
    errors = errors + (thread:get("inactive") or 0)
  end
  io.write(string.format(
    'BENCHJSON {"requests": %d, "duration_us": %d, "p50_us": %d, "p99_us": %d, '
    .. '"errors": %d, "non2xx": %d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    errors, summary.errors.status))
end
"""


@dataclass
class LoadResult:
    rps: float
    p50_ms: float
    p99_ms: float
    requests: int
    errors: int
    # The untimed first pass over every token (each seen once: caches cold), when there was one.
    first_pass: LoadResult | None = None

    def as_dict(self) -> dict[str, Any]:
        figures: dict[str, Any] = {
            "rps": round(self.rps, 1),
            "p50_ms": round(self.p50_ms, 2),
            "p99_ms": round(self.p99_ms, 2),
            "requests": self.requests,
            "errors": self.errors,
        }
        if self.first_pass is not None:
            figures["first_pass"] = self.first_pass.as_dict()
        return figures


FIRST_PASS_LIMIT_SECONDS = 120


def have_wrk() -> bool:
    return shutil.which("wrk") is not None


def pin(cpu: int | None) -> list[str]:
    if cpu is None or shutil.which("taskset") is None or (os.cpu_count() or 1) < 2:
        return []
    return ["taskset", "-c", str(cpu)]


def run_wrk(
    url: str,
    path: str,
    *,
    connections: int = 64,
    duration: int = 10,
    threads: int = 2,
    tokens: list[str] | None = None,
    cookie: str = "auth_token",
    method: str = "GET",
    once: bool = False,
    cpu: int | None = 1,
    origin: str = "http://127.0.0.1:8080",
    bearer: bool = False,
    body_field: str | None = None,
) -> LoadResult:
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "bench.lua"
        script.write_text(LUA)
        env = dict(os.environ)
        env.update(
            BENCH_PATH=path,
            BENCH_METHOD=method,
            BENCH_COOKIE=cookie,
            BENCH_THREADS=str(threads),
            BENCH_ORIGIN=origin,
            BENCH_ONCE="1" if once else "0",
            BENCH_BEARER="1" if bearer else "0",
        )
        if body_field:
            env["BENCH_BODY_FIELD"] = body_field
        if tokens:
            token_file = Path(tmp) / "tokens.txt"
            token_file.write_text("\n".join(tokens) + "\n")
            env["BENCH_TOKENS"] = str(token_file)
        command = [
            *pin(cpu),
            "wrk",
            f"-t{threads}",
            f"-c{connections}",
            f"-d{duration}s",
            "--latency",
            "-s",
            str(script),
            url + path,
        ]
        output = subprocess.run(command, capture_output=True, text=True, env=env, check=True).stdout
    line = next(row for row in output.splitlines() if row.startswith("BENCHJSON "))
    data = json.loads(line[len("BENCHJSON ") :])
    seconds = data["duration_us"] / 1e6
    return LoadResult(
        rps=data["requests"] / seconds,
        p50_ms=data["p50_us"] / 1000,
        p99_ms=data["p99_us"] / 1000,
        requests=data["requests"],
        errors=data["errors"],
    )


async def _aiohttp_load(
    url: str,
    *,
    connections: int,
    duration: float,
    tokens: list[str] | None,
    cookie: str,
    method: str,
    once: bool,
    origin: str,
    bearer: bool = False,
    body_field: str | None = None,
) -> LoadResult:
    latencies: list[float] = []
    errors = 0
    counter = 0
    deadline = time.perf_counter() + duration
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(
        connector=connector, cookie_jar=aiohttp.DummyCookieJar()
    ) as session:

        async def worker() -> None:
            nonlocal errors, counter
            while time.perf_counter() < deadline:
                headers = {"Origin": origin}
                body: dict[str, str] | None = None
                if tokens:
                    if once and counter >= len(tokens):
                        return
                    token = tokens[counter % len(tokens)]
                    if body_field:
                        body = {body_field: token}
                    elif bearer:
                        headers["Authorization"] = f"Bearer {token}"
                    else:
                        headers["Cookie"] = f"{cookie}={token}"
                counter += 1
                started = time.perf_counter()
                try:
                    async with session.request(method, url, headers=headers, json=body) as response:
                        answer = await response.read()
                        if response.status >= 400 or (
                            body_field and b'"active":true' not in answer.replace(b" ", b"")
                        ):
                            errors += 1
                except aiohttp.ClientError:
                    errors += 1
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(connections)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    if not latencies:
        return LoadResult(0, 0, 0, 0, errors)
    return LoadResult(
        rps=len(latencies) / elapsed,
        p50_ms=latencies[len(latencies) // 2] * 1000,
        p99_ms=latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        requests=len(latencies),
        errors=errors,
    )


def run_load(
    url: str,
    path: str,
    *,
    connections: int = 64,
    duration: int = 10,
    tokens: list[str] | None = None,
    cookie: str = "auth_token",
    method: str = "GET",
    once: bool = False,
    cpu: int | None = 1,
    origin: str = "http://127.0.0.1:8080",
    warmup: int = 3,
    bearer: bool = False,
    body_field: str | None = None,
) -> LoadResult:
    # What every pass shares: the same requests, from the same number of connections.
    shape: dict[str, Any] = dict(
        connections=connections,
        tokens=tokens,
        cookie=cookie,
        method=method,
        origin=origin,
        bearer=bearer,
        body_field=body_field,
    )
    first_pass = None
    if tokens and warmup and not once:
        # Every token once first (from this process, untimed): a fixed-length warm-up leaves
        # part of a large token set cold on a slow machine, and its misses then land in the
        # measured seconds. Kept in the results as what a cold cache costs.
        first_pass = asyncio.run(
            _aiohttp_load(url + path, duration=FIRST_PASS_LIMIT_SECONDS, once=True, **shape)
        )
    if warmup and not once:
        # Untimed pass: pools fill, caches warm, so the figure is the steady state.
        run_load(url, path, duration=warmup, once=once, cpu=cpu, warmup=0, **shape)
    if have_wrk():
        result = run_wrk(url, path, duration=duration, once=once, cpu=cpu, **shape)
    else:
        if cpu is not None and hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
            os.sched_setaffinity(0, {cpu})
        result = asyncio.run(_aiohttp_load(url + path, duration=duration, once=once, **shape))
    result.first_pass = first_pass
    return result
