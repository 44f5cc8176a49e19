"""The targets the issues set, next to each figure in the printed table.

A target reads one figure (and, for ratios, the hello-world of the same run) and answers
met / not met, or nothing when the figure lacks what the target needs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Figure = dict[str, Any]


@dataclass(frozen=True)
class Target:
    text: str
    met: Callable[[Figure, dict[str, Figure]], bool | None]


def _number(figure: Figure, key: str) -> float | None:
    value = figure.get(key)
    return float(value) if isinstance(value, (int, float)) else None


def ratio_at_least(ratio: float, p99_below_ms: float | None = None) -> Target:
    text = f">= {ratio:.2f}x" + (f", p99 < {p99_below_ms:g} ms" if p99_below_ms else "")

    def met(figure: Figure, _all: dict[str, Figure]) -> bool | None:
        value = _number(figure, "ratio_to_hello")
        if value is None:
            return None
        if p99_below_ms is not None:
            p99 = _number(figure, "p99_ms")
            if p99 is None or p99 >= p99_below_ms:
                return False
        return value >= ratio

    return Target(text, met)


def rate_at_least(rate: float, unit: str) -> Target:
    def met(figure: Figure, _all: dict[str, Figure]) -> bool | None:
        value = _number(figure, "rate")
        return None if value is None else value >= rate

    return Target(f">= {rate:,.0f} {unit}", met)


def below(key: str, limit: float, text: str) -> Target:
    def met(figure: Figure, _all: dict[str, Figure]) -> bool | None:
        value = _number(figure, key)
        return None if value is None else value < limit

    return Target(text, met)


def at_least(key: str, limit: float, text: str) -> Target:
    def met(figure: Figure, _all: dict[str, Figure]) -> bool | None:
        value = _number(figure, key)
        return None if value is None else value >= limit

    return Target(text, met)


def like(other: str, share: float = 0.9) -> Target:
    """About as fast as another figure of the same run (at least `share` of its ratio)."""

    def met(figure: Figure, figures: dict[str, Figure]) -> bool | None:
        mine = _number(figure, "ratio_to_hello")
        theirs = _number(figures.get(other, {}), "ratio_to_hello")
        if mine is None or theirs is None:
            return None
        return mine >= theirs * share

    return Target(f"~ {other} (>= {share:.0%} of it)", met)


def sse_streams(clients: int, p99_ms: float, rss_mb: float) -> Target:
    def met(figure: Figure, _all: dict[str, Figure]) -> bool | None:
        p99, rss = _number(figure, "p99_ms"), _number(figure, "server_rss_mb")
        if p99 is None or rss is None:
            return None
        dropped = figure.get("dropped", 0) or 0
        complete = figure.get("received", figure.get("messages")) == figure.get("expected")
        return (
            figure.get("clients") == clients
            and p99 < p99_ms
            and rss < rss_mb
            and dropped == 0
            and complete
        )

    return Target(
        f"{clients:,} clients, p99 < {p99_ms:g} ms, RSS < {rss_mb:g} MB, none dropped", met
    )


def reported(text: str) -> Target:
    """A figure with no target, shown for what it tells (met/not met stays empty)."""
    return Target(text, lambda _figure, _all: None)


TARGETS: dict[str, Target] = {
    "me_authenticated": ratio_at_least(0.70, p99_below_ms=10),
    "me_cold_eddsa": ratio_at_least(0.15),
    "refresh": ratio_at_least(0.20, p99_below_ms=50),
    "notifications_list": ratio_at_least(0.50),
    "unread_count": ratio_at_least(0.50),
    "dispatch_queued": ratio_at_least(0.15),
    "dispatch_inline_declared": at_least("ratio_to_python", 0.9, ">= 0.9x the Python-defined send"),
    "sse_latency_10000_clients": sse_streams(10_000, 250, 600),
    "api_key_check": like("me_authenticated"),
    "me_custom_role": like("me_authenticated", 0.95),
    "send_batch": rate_at_least(2_000, "notifications/s"),
    "webhook_deliveries": rate_at_least(2_000, "deliveries/s"),
    "outbox_overhead": below("overhead_pct", 10, "< 10% overhead"),
    "metrics_scrape": below("p99_ms", 5, "p99 < 5 ms, no statement"),
    "sendgrid_ingestion": rate_at_least(5_000, "events/s"),
    # perf-db (issue 19): one prepared statement's round trip through tenantd/db, no target.
    "db_roundtrip": reported("(none; cost under every statement)"),
    "announce_commits": at_least("speedup", 1.0, "relay >= NOTIFY in the transaction"),
    # issue 31: the same uncached inbox reads, primary only and through a replica.
    "inbox_reads_primary": reported("(none; the replica figure's baseline)"),
    "inbox_reads_replica": reported("(none; compare with inbox_reads_primary)"),
    # issue 31: send on A to the SSE frame on B, per bus; "x hello" is p50 in hello round trips.
    "sse_cross_instance_postgres": reported("(none; p50/p99 per bus)"),
    "sse_cross_instance_nats": reported("(none; p50/p99 per bus)"),
    "sse_cross_instance_redis": reported("(none; p50/p99 per bus)"),
}


def verdict(name: str, figure: Figure, figures: dict[str, Figure]) -> tuple[str, str]:
    """(target text, "met" / "NOT MET" / "") for the table."""
    target = TARGETS.get(name)
    if target is None:
        return "", ""
    met = target.met(figure, figures)
    return target.text, "" if met is None else ("met" if met else "NOT MET")
