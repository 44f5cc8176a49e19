"""The lock-free request counts expose exactly what prometheus_client's Counter and
Histogram did (issue 19): names, labels, buckets, sums, counts and `_created` series."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from tenantd.ops.metrics import LATENCY_BUCKETS, Metrics
from tenantd.ops.request_counts import RequestCounts

OBSERVED = [
    ("GET", "/api/v1/users/me", 200, 0.001),
    ("GET", "/api/v1/users/me", 200, 0.005),  # on a bound: counted in it, as Histogram does
    ("GET", "/api/v1/users/me", 200, 0.0051),
    ("GET", "/api/v1/users/me", 401, 12.0),  # beyond the last bound: +Inf only
    ("POST", "/api/v1/auth/refresh", 200, 0.3),
    ("GET", "<unmatched>", 404, 0.0),
]


def without_created_values(text: str) -> str:
    return re.sub(r"(_created\{[^}]*\}) \S+", r"\1 T", text)


def test_exposition_matches_counter_and_histogram() -> None:
    reference = CollectorRegistry()
    labels = ["method", "route", "status"]
    requests = Counter(
        "tenantd_http_requests",
        "HTTP requests answered, by method, route template and status",
        labels,
        registry=reference,
    )
    latency = Histogram(
        "tenantd_http_request_duration_seconds",
        "HTTP request latency, by method, route template and status",
        labels,
        buckets=LATENCY_BUCKETS,
        registry=reference,
    )
    ours = CollectorRegistry(auto_describe=True)
    counts = RequestCounts(LATENCY_BUCKETS)
    ours.register(counts)
    for method, route, status, seconds in OBSERVED:
        requests.labels(method, route, str(status)).inc()
        latency.labels(method, route, str(status)).observe(seconds)
        counts.observe((method, route, status), seconds)
    expected = without_created_values(generate_latest(reference).decode())
    assert without_created_values(generate_latest(ours).decode()) == expected
    assert "tenantd_http_request_duration_seconds_created{" in expected


def test_metrics_counts_requests_and_folds_unknown_methods() -> None:
    metrics = Metrics()
    metrics.observe_request("GET", "/healthz", 200, 0.002)
    metrics.observe_request("BREW", "/healthz", 200, 0.002)
    text = generate_latest(metrics.registry).decode()
    assert 'tenantd_http_requests_total{method="GET",route="/healthz",status="200"} 1.0' in text
    assert 'tenantd_http_requests_total{method="OTHER",route="/healthz",status="200"} 1.0' in text
    bucket = 'tenantd_http_request_duration_seconds_bucket{le="0.005",method="GET"'
    assert f'{bucket},route="/healthz",status="200"}} 1.0' in text
