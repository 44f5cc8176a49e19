"""Short figures are taken several times and the median round is reported: on a shared
two-core machine one round of a few seconds swings by a quarter from run to run."""

from __future__ import annotations

from typing import Any

ROUNDS = 3


def median_of(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The median round by rate, with every round's rate alongside."""
    ordered = sorted(rounds, key=lambda r: r["rate"])
    return {**ordered[len(ordered) // 2], "rounds": [r["rate"] for r in rounds]}
