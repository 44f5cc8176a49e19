"""Which sweeps exist: ours and the adapters over the domains' sweep functions."""

from __future__ import annotations

SWEEP_NAMES = ("invitations", "accounts", "dedup", "sessions", "jobs")


def load() -> None:
    """Import every module that registers a sweep (idempotent)."""
    from tenantd.ops import domain_sweeps, session_sweep  # noqa: F401
