"""A private primary and a streaming replica of it (bench/private_servers.py's ReplicaPair),
for the read-replica tests: the replica's replay paused and resumed, the replica stopped and
started, from the test. Built once per test module (initdb, the migrations and the base
backup take seconds)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.private_servers import ReplicaPair

__all__ = ["ReplicaPair", "replica_pair"]


@pytest.fixture(scope="module")
def replica_pair() -> Iterator[ReplicaPair]:
    """A migrated primary and its streaming replica, of this module's own."""
    root = Path(tempfile.mkdtemp(prefix="tenantd-replica-"))
    pair = ReplicaPair(root)
    try:
        pair.build()
        yield pair
    finally:
        pair.stop()
        shutil.rmtree(root, ignore_errors=True)
