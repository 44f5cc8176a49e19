"""Provide a database: DATABASE_URL as it is, or the embedded private cluster."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tenantd.db.embedded import EmbeddedCluster
from tenantd.settings import Settings


@contextlib.contextmanager
def provided_database(settings: Settings) -> Iterator[str]:
    """Yield a database URL; an embedded cluster started here is stopped on exit."""
    if settings.database.url:
        yield settings.database.url
        return
    cluster = EmbeddedCluster(settings.data_dir / "pg")
    started = cluster.start()
    try:
        yield cluster.url
    finally:
        if started:
            cluster.stop()
