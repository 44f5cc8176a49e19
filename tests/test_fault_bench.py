"""The fault bench (scripts/faults, bench/faults.py) still runs: one small scenario, kill -9
of a real `tenantd serve` mid-webhook-delivery on the bench's own private cluster. Not the
bench itself (its table is in docs/faults.md), only proof the script has not rotted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_fault_bench_runs_one_scenario(tmp_path: Path) -> None:
    out = tmp_path / "faults.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.faults",
            "--only",
            "kill9_webhooks",
            "--count",
            "40",
            "--dir",
            str(tmp_path / "faults"),
            "--json",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    [row] = json.loads(out.read_text())
    assert row["scenario"] == "kill9_webhooks"
    assert row["accepted"] == 40 and row["delivered"] == 40 and row["lost"] == 0, row
    # Ten objects, one delivery each in flight at the kill: at most ten repeats.
    assert row["doubled"] <= 10, row
    assert "| kill9_webhooks | 40 |" in result.stdout
