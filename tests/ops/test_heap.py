"""`tenantd serve` takes its startup heap out of garbage collection and spaces full
collections out (checked in a fresh interpreter: the test process must keep its defaults)."""

from __future__ import annotations

import json
import subprocess
import sys

from tenantd.ops import heap

PROBE = """
import asyncio, gc, json
from tenantd.ops.heap import freeze_startup_heap
before = gc.get_threshold()
asyncio.run(freeze_startup_heap(None))
print(json.dumps({"before": before, "after": gc.get_threshold(), "frozen": gc.get_freeze_count()}))
"""


def test_startup_heap_is_frozen_and_full_collections_are_rarer() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    state = json.loads(done.stdout)
    assert state["frozen"] > 10_000  # modules, schemas, the app's own objects
    assert state["after"] == [heap.GEN0_THRESHOLD, heap.GEN1_THRESHOLD, heap.GEN2_THRESHOLD]
    assert state["after"][2] > state["before"][2]
