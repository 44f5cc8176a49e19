"""scripts/bench: private database + server, seeded data, load from another process/core.

Prints a table and writes bench/results.json. Every throughput figure is also given as a
ratio to a bare aiohttp hello-world measured in the same run, so results compare across
machines.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench import apikeys, compare, extra, keys, replica, roles, sse_cross
from bench.loadgen import LoadResult, have_wrk, pin, run_load
from bench.private_servers import free_port
from bench.seed import SeedPlan, refresh_token, seed
from bench.targets import verdict
from tenantd.db.embedded import EmbeddedCluster

ROOT = Path(__file__).resolve().parents[1]
WARM_TOKENS = 2000  # the warm /me figures' tokens, one per user; the cold tokens' users
SECRET = "bench-secret-key-0123456789abcdefghijklmnopqrstuvwxyz"
ORIGIN = "http://127.0.0.1:8080"
console = Console(width=160)


def wait_http(url: str, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def current_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Server:
    def __init__(self, command: list[str], env: dict[str, str], url: str, cpu: int | None):
        self.process = subprocess.Popen(
            [*pin(cpu), *command],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(ROOT / "var" / "bench" / "server.log", "ab"),  # noqa: SIM115
        )
        self.url = url

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()


def hello_server(cpu: int | None) -> Server:
    """The bare aiohttp hello-world every ratio is taken against (bench/hello.py)."""
    port = free_port()
    return Server(
        [sys.executable, "-m", "bench.hello", str(port)],
        dict(os.environ, PYTHONPATH=str(ROOT)),
        f"http://127.0.0.1:{port}",
        cpu,
    )


def server_env(database_url: str, data_dir: Path, **overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TENANTD_", "DATABASE_URL"))}
    env.update(
        DATABASE_URL=database_url,
        TENANTD_DATA_DIR=str(data_dir),
        SECRET_KEY=SECRET,
        PUBLIC_BASE_URL=ORIGIN,
        COOKIE_SECURE="false",
        LOG_LEVEL="error",
        TENANTD_INTROSPECT_ALLOWED_IPS="127.0.0.1",
        EMAIL_PROVIDER="file",
        DB_POOL_MAX="20",
        TENANTD_EVENT_MODULES="bench.events",
        PYTHONPATH=str(ROOT),
        RATE_LIMIT_ENABLED="false",
    )
    env.update(overrides)
    return env


def main() -> None:
    parser = argparse.ArgumentParser(prog="scripts/bench", description=__doc__)
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="data set multiplier (1 = 100k users, 1M notifications)",
    )
    parser.add_argument("--duration", type=int, default=10, help="seconds per HTTP measurement")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--only", default="", help="comma list of benchmarks to run")
    parser.add_argument(
        "--cold-tokens",
        type=int,
        default=100_000,
        help="distinct never-used tokens for the cold /me figures (more than one run sends)",
    )
    parser.add_argument("--no-seed", action="store_true", help="reuse the data already seeded")
    parser.add_argument(
        "--output",
        default="",
        help="results file (default bench/results.json, or results-scale<N>.json when N != 1)",
    )
    args = parser.parse_args()
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    if not args.output:
        suffix = "" if args.scale == 1 else f"-scale{args.scale:g}"
        args.output = str(ROOT / "bench" / f"results{suffix}.json")

    def wanted(name: str) -> bool:
        return not only or name in only

    data_dir = ROOT / "var" / "bench"
    data_dir.mkdir(parents=True, exist_ok=True)
    database_url = os.environ.get("BENCH_DATABASE_URL")
    cluster = None
    if not database_url:
        # Size the buffer cache like a production server would be for this data set: with the
        # development default (128 MB) every insert at --scale 10 evicts dirty index pages.
        buffers = os.environ.get("BENCH_SHARED_BUFFERS", "2GB")
        cluster = EmbeddedCluster(data_dir / "pg", options=f"-c shared_buffers={buffers}")
        cluster.start()
        database_url = cluster.url
    from tenantd.db.dsn import url_to_dsn

    dsn = url_to_dsn(database_url)
    cpus = os.cpu_count() or 1
    server_cpu, load_cpu = (0, 1) if cpus >= 2 else (None, None)
    results: dict[str, Any] = {
        "machine": {
            "cpus": cpus,
            "platform": platform.platform(),
            "python": platform.python_version(),
            "load_driver": "wrk" if have_wrk() else "aiohttp",
        },
        "scale": args.scale,
        "figures": {},
    }
    figures: dict[str, dict[str, Any]] = results["figures"]
    plan = SeedPlan.scaled(args.scale)
    results["data"] = plan.__dict__
    clone: EmbeddedCluster | None = None  # the replica of the read-replica figures
    try:
        subprocess.run(
            [sys.executable, "-m", "tenantd", "migrate"],
            env=server_env(database_url, data_dir),
            check=True,
            capture_output=True,
        )
        if not args.no_seed:
            console.print(f"[bold]seeding[/bold] {plan}")
            seed(dsn, plan, SECRET, log=console.print)

        def http(name: str, server_url: str, path: str, **kw: Any) -> None:
            if not wanted(name):
                return
            result: LoadResult = run_load(
                server_url,
                path,
                connections=args.connections,
                duration=args.duration,
                cpu=load_cpu,
                origin=ORIGIN,
                **kw,
            )
            figures[name] = result.as_dict()
            console.print(
                f"  {name}: {result.rps:,.0f} req/s p50 {result.p50_ms:.1f} ms"
                f" p99 {result.p99_ms:.1f} ms errors {result.errors}"
            )

        # 1. Framework limit
        hello = hello_server(server_cpu)
        try:
            wait_http(f"{hello.url}/")
            http("hello_world", hello.url, "/")
        finally:
            hello.stop()

        # 2. The service
        port = free_port()
        env = server_env(
            database_url, data_dir, NOTIFICATIONS_SSE_ENABLED="true", QUEUES_ENABLED="true"
        )
        env.update(extra.server_env())
        server = Server(
            [sys.executable, "-m", "tenantd", "serve", "--no-migrate", "--port", str(port)],
            env,
            f"http://127.0.0.1:{port}",
            server_cpu,
        )
        try:
            wait_http(f"{server.url}/healthz")
            keyring = keys.keyring_for(env)  # EdDSA, the default: the server's own key
            tokens = keys.access_tokens(keyring, WARM_TOKENS, plan.accounts)
            http("me_authenticated", server.url, "/api/v1/users/me", tokens=tokens)
            if wanted("me_custom_role"):  # the same /me, every caller with a custom role
                custom = roles.custom_role_tokens(database_url, keyring, WARM_TOKENS)
                run_load(server.url, "/api/v1/users/me", tokens=custom, duration=3, cpu=load_cpu)
                http("me_custom_role", server.url, "/api/v1/users/me", tokens=custom)
            http("me_anonymous", server.url, "/api/v1/users/me")
            refresh = [refresh_token(SECRET, i) for i in range(1, plan.sessions + 1)]
            http(
                "refresh",
                server.url,
                "/api/v1/auth/refresh",
                tokens=refresh,
                cookie="refresh_token",
                method="POST",
                once=True,
            )
            if wanted("me_cold_eddsa"):
                # A token's first request: signature verified (no memo), context cache miss.
                # New tokens of the users above (as a refresh issues them every 15 minutes),
                # whose /me this instance has already served.
                cold = keys.access_tokens(
                    keyring, args.cold_tokens, plan.accounts, owners=WARM_TOKENS
                )
                http("me_cold_eddsa", server.url, "/api/v1/users/me", tokens=cold, once=True)
            http("jwks", server.url, "/.well-known/jwks.json")
            if wanted("introspect") and have_wrk():
                # Driven by wrk like the other HTTP figures: the one-process aiohttp driver
                # spent as much CPU per request as the server, so it measured itself.
                path = "/api/v1/auth/introspect"
                http(
                    "introspect", server.url, path, tokens=tokens, method="POST", body_field="token"
                )
            elif wanted("introspect"):
                figures["introspect"] = keys.introspection(
                    server.url, tokens, seconds=args.duration, in_flight=args.connections
                )
                console.print(f"  introspect: {figures['introspect']}")
            http("notifications_list", server.url, "/api/v1/notifications?limit=20", tokens=tokens)
            http("unread_count", server.url, "/api/v1/notifications/unread-count", tokens=tokens)
            if wanted("api_key_check"):  # a trivial server route behind the API-key guard
                key = [apikeys.create_key(env)]
                path = "/api/v1/notifications/event-types"
                http("api_key_check", server.url, path, tokens=key, bearer=True)
            http("sessions_list", server.url, "/api/v1/auth/sessions", tokens=tokens)
            for name, run in extra.service_benchmarks():
                if wanted(name):
                    bench_env = {**env, "BENCH_SERVER_PID": str(server.pid)}
                    figures[name] = run(server.url, dsn, bench_env, plan)
                    console.print(f"  {name}: {figures[name]}")
            results["server_peak_rss_mb"] = round(peak_rss_mb(server.pid), 1)
        finally:
            server.stop()

        # 3. The same cold /me in the HS256 compatibility mode (a server of its own).
        if wanted("me_cold_hs256"):
            port = free_port()
            hs_env = {**env, "ACCESS_TOKEN_ALG": "HS256"}
            hs_server = Server(
                [sys.executable, "-m", "tenantd", "serve", "--no-migrate", "--port", str(port)],
                hs_env,
                f"http://127.0.0.1:{port}",
                server_cpu,
            )
            try:
                wait_http(f"{hs_server.url}/healthz")
                hs_keyring = keys.keyring_for(hs_env)
                # The same users' /me served first (untimed), as on the EdDSA server.
                warm = keys.access_tokens(hs_keyring, WARM_TOKENS, plan.accounts)
                run_load(hs_server.url, "/api/v1/users/me", tokens=warm, duration=3, cpu=load_cpu)
                cold = keys.access_tokens(
                    hs_keyring, args.cold_tokens, plan.accounts, owners=WARM_TOKENS
                )
                http("me_cold_hs256", hs_server.url, "/api/v1/users/me", tokens=cold, once=True)
            finally:
                hs_server.stop()

        # 4. Inbox reads with and without a streaming replica (bench/replica.py).
        replica_url = os.environ.get("BENCH_REPLICA_URL")
        if any(wanted(name) for name in replica.FIGURES):
            if not replica_url and cluster is not None:
                console.print("[bold]cloning[/bold] a streaming replica (pg_basebackup -R)")
                clone = replica.build_replica(cluster, data_dir / "replica")
                replica_url = clone.url
            if not replica_url:
                console.print("  no replica: set BENCH_REPLICA_URL with BENCH_DATABASE_URL")
            for name, replicas in zip(replica.FIGURES, ("", replica_url or ""), strict=True):
                if not wanted(name) or not replica_url:
                    continue
                port = free_port()
                read_env = {**env, "DATABASE_REPLICA_URLS": replicas}
                reader = Server(
                    [sys.executable, "-m", "tenantd", "serve", "--no-migrate", "--port", str(port)],
                    read_env,
                    f"http://127.0.0.1:{port}",
                    server_cpu,
                )
                try:
                    wait_http(f"{reader.url}/healthz")
                    readers = keys.access_tokens(
                        keys.keyring_for(read_env), WARM_TOKENS, plan.accounts
                    )
                    http(name, reader.url, replica.inbox_path(), tokens=readers)
                    if replicas and name in figures:
                        figures[name]["served_by_replica"] = replica.served_inbox(replicas)
                finally:
                    reader.stop()

        # 5. Cross-instance SSE latency on each bus: two servers, send on A, frame on B.
        if any(wanted(name) for name in sse_cross.FIGURES):
            cross_latency(env, figures, wanted, plan.accounts, server_cpu)
    finally:
        if clone is not None:
            clone.stop()
        if cluster is not None and os.environ.get("BENCH_KEEP_DB") != "1":
            cluster.stop()

    base = figures.get("hello_world", {}).get("rps")
    if base:
        for figure in figures.values():
            value = figure.get("rps", figure.get("rate"))
            if isinstance(value, (int, float)):
                figure["ratio_to_hello"] = round(value / base, 3)
            notify = figure.get("notify_rate")  # announce_commits: today's way, side by side
            if isinstance(notify, (int, float)):
                figure["notify_ratio_to_hello"] = round(notify / base, 3)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(results, indent=2) + "\n")
    console.print(results_table(results, args.scale))
    console.print(f"server peak RSS: {results.get('server_peak_rss_mb')} MB; written {args.output}")
    other = ROOT / "bench" / ("results-scale10.json" if args.scale == 1 else "results.json")
    if args.scale in (1, 10) and other.exists() and not only:
        pair = [json.loads(other.read_text()), results]
        pair.sort(key=lambda r: float(r.get("scale", 1)))
        console.print(compare.compare(*pair))


@contextlib.contextmanager
def tenantd_servers(env: dict[str, str], count: int, cpu: int | None) -> Iterator[list[str]]:
    """`count` servers on the same database and settings, ready (bus connected)."""
    started: list[Server] = []
    try:
        for _ in range(count):
            port = free_port()
            started.append(
                Server(
                    [sys.executable, "-m", "tenantd", "serve", "--no-migrate", "--port", str(port)],
                    env,
                    f"http://127.0.0.1:{port}",
                    cpu,
                )
            )
        for server in started:
            wait_http(f"{server.url}/readyz", timeout=90)
        yield [server.url for server in started]
    finally:
        for server in started:
            server.stop()


def cross_latency(
    env: dict[str, str],
    figures: dict[str, dict[str, Any]],
    wanted: Any,
    accounts: int,
    cpu: int | None,
) -> None:
    """The sse_cross_instance_<bus> figures (bench/sse_cross.py), and their hello unit."""
    hello = hello_server(cpu)
    try:
        wait_http(f"{hello.url}/")
        hello_ms = asyncio.run(sse_cross.hello_round_trip_ms(f"{hello.url}/"))
    finally:
        hello.stop()
    cross_env = {**env, "QUEUES_ENABLED": "false"}  # A dispatches inline, in the send
    key = apikeys.create_key(cross_env)
    token = keys.access_tokens(keys.keyring_for(cross_env), 1, accounts)[0]

    def pair(overrides: dict[str, str]) -> Any:
        return tenantd_servers({**cross_env, **overrides}, 2, cpu)

    for kind in sse_cross.BUSES:
        name = sse_cross.figure_name(kind)
        if not wanted(name):
            continue
        try:
            figure = sse_cross.measure(kind, pair, token, key, sse_cross.user_of(token), hello_ms)
        except Exception as error:
            console.print(f"  {name}: not measured ({error!r})")
            continue
        figures[name] = figure
        console.print(f"  {name}: {figure}")


def results_table(results: dict[str, Any], scale: float) -> Table:
    """One row a figure: result, latency, ratio to hello-world and the issue's target."""
    figures: dict[str, dict[str, Any]] = results["figures"]
    table = Table(title=f"tenantd bench (scale {scale:g}, {results['machine']['load_driver']})")
    for column in ("figure", "result", "p50 ms", "p99 ms", "x hello", "target", "met", "errors"):
        table.add_column(column)
    for name, figure in figures.items():
        value = figure.get("rps", figure.get("rate"))
        unit = "req/s" if "rps" in figure else figure.get("unit", "")
        result = f"{value:,.0f} {unit}" if isinstance(value, (int, float)) else ""
        if "overhead_pct" in figure:
            result = f"{figure['overhead_pct']}% overhead"
        target, met = verdict(name, figure, figures)
        table.add_row(
            name,
            result,
            str(figure.get("p50_ms", "")),
            str(figure.get("p99_ms", "")),
            str(figure.get("ratio_to_hello", figure.get("p50_hello_round_trips", ""))),
            target,
            met,
            str(figure.get("errors", "")),
        )
    return table


if __name__ == "__main__":
    main()
