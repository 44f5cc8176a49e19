"""`tenantd serve` (what systemd runs) refuses to start without DATABASE_URL, in one line; a
development run (--dev, or TENANTD_DEV=true as scripts/run sets) still gets its private
cluster."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.factories import run_tenantd
from tests.helpers import SECRET
from tests.ops.servers import running, start_server


def bare_env(data_dir: Path) -> dict[str, str]:
    """No DATABASE_URL anywhere: not in this process's environment either."""
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    env.update(TENANTD_DATA_DIR=str(data_dir), SECRET_KEY=SECRET, LOG_LEVEL="warning")
    env.pop("TENANTD_DEV", None)
    return env


async def test_serve_without_a_database_url_refuses_in_one_line(tmp_path: Path) -> None:
    env = bare_env(tmp_path)
    code, out, err = await run_tenantd(env, "serve", "--port", "1")
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "DATABASE_URL" in lines[0] and "--dev" in lines[0]
    assert "Traceback" not in err + out
    assert not (tmp_path / "pg").exists()  # no private cluster was started


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """Outside pytest's own temporary root: the cluster's parents are opened to the postgres
    user, and a pytest starting meanwhile closes its root again."""
    path = Path(tempfile.mkdtemp(prefix="tenantd-dev-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("how", ["flag", "env"])
async def test_a_development_run_still_starts_its_private_cluster(data_dir: Path, how: str) -> None:
    env = bare_env(data_dir)
    if how == "env":
        env["TENANTD_DEV"] = "true"
    server = start_server("dev", env, data_dir, *(["--dev"] if how == "flag" else []))
    async with running([server]):
        assert (data_dir / "pg").is_dir()
