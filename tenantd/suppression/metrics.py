"""What the suppression domain shows on /metrics: the list by provider and reason, counted on
write by triggers (sql/0094) and read by the kernel's metrics task."""

from __future__ import annotations

from tenantd.ops.metrics import CountedGauge

SUPPRESSIONS = CountedGauge(
    family="suppressions",
    name="tenantd_email_suppressions",
    help="Suppressed email addresses by provider and reason",
    labels=("provider", "reason"),
)

GAUGES = (SUPPRESSIONS,)
