"""Scale 1 against scale 10: every figure's ratio (or rate) side by side, and whether the
larger data set keeps it within 10% (the issue's bar).

    python -m bench.compare bench/results.json bench/results-scale10.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

TOLERANCE = 0.10


def comparable(first: dict[str, Any], second: dict[str, Any]) -> tuple[float, float] | None:
    """The same measure from both runs: the ratio to hello-world where both have it."""
    for key in ("ratio_to_hello", "rate"):
        a, b = first.get(key), second.get(key)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a:
            return float(a), float(b)
    return None


def compare(small: dict[str, Any], large: dict[str, Any]) -> Table:
    table = Table(title=f"scale {small.get('scale')} -> scale {large.get('scale')}")
    for column in (
        "figure",
        f"scale {small.get('scale')}",
        f"scale {large.get('scale')}",
        "change",
        "within 10%",
    ):
        table.add_column(column)
    for name, figure in small.get("figures", {}).items():
        pair = comparable(figure, large.get("figures", {}).get(name, {}))
        if pair is None or name == "hello_world":
            continue
        before, after = pair
        change = after / before - 1
        table.add_row(
            name,
            f"{before:,.3f}",
            f"{after:,.3f}",
            f"{change:+.1%}",
            "yes" if change >= -TOLERANCE else "NO",
        )
    return table


def main() -> None:
    small, large = (json.loads(Path(p).read_text()) for p in sys.argv[1:3])
    Console(width=120).print(compare(small, large))


if __name__ == "__main__":
    main()
