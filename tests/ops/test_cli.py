"""`tenantd sweep` and `tenantd status`: output, effects and exit codes (0 ok, 1 refused,
2 bad usage), through the real console script and in process."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from typer.testing import CliRunner

from tenantd.cli.main import app
from tenantd.db import Database
from tenantd.db.dsn import url_to_dsn
from tenantd.db.migrate import sql_dir
from tenantd.ops.sweeps import Sweep, SweepContext

TENANTD = str(Path(sys.executable).with_name("tenantd"))


def run_sql(url: str, statement: str) -> Any:
    with psycopg2.connect(url_to_dsn(url)) as conn, conn.cursor() as cur:
        cur.execute(statement)
        return cur.fetchone() if cur.description else None


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TENANTD, *args],
        env={"PATH": os.environ.get("PATH", ""), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_sweep_dry_run_then_real_run(db: Database, env: dict[str, str], migrated: str) -> None:
    run_sql(
        migrated,
        "INSERT INTO revoked_tokens (jti, user_id, expires_at)"
        " SELECT gen_random_uuid(), gen_random_uuid(), now() - interval '1 hour'"
        " FROM generate_series(1, 30)",
    )
    dry = cli(env, "sweep", "sessions", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    [outcome] = json.loads(dry.stdout)
    assert outcome["status"] == "dry_run"
    assert outcome["counts"]["revoked_tokens"] == 30
    assert run_sql(migrated, "SELECT count(*) FROM revoked_tokens") == (30,)

    real = cli(env, "sweep", "sessions", "--batch-size", "7")
    assert real.returncode == 0, real.stderr
    # Not a terminal: plain progress lines, one per batch, then the summary table.
    assert "sessions: revoked_tokens +7 (7)" in real.stdout
    assert "sessions: revoked_tokens +2 (30)" in real.stdout
    assert "revoked_tokens" in real.stdout.split("Sweep")[-1]
    assert run_sql(migrated, "SELECT count(*) FROM revoked_tokens") == (0,)


def test_sweep_unknown_name_is_bad_usage(env: dict[str, str], migrated: str) -> None:
    result = cli(env, "sweep", "everything")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "unknown sweep" in result.stderr


def test_status_reports_ready_deployment(db: Database, env: dict[str, str]) -> None:
    result = cli(env, "status", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["database"] == "ok"
    assert report["migrations"]["pending"] == []
    assert report["migrations"]["applied"] >= 2
    assert report["queue"] == {"queued": 0, "due": 0, "running": 0, "failed": 0}
    assert report["channels"] == {"in_app": True, "email": "file", "sse": False, "web_push": False}
    human = cli({**env, "NOTIFICATIONS_SSE_ENABLED": "true"}, "status")
    assert human.returncode == 0
    assert "channel sse" in human.stdout and "none pending" in human.stdout


def test_status_refuses_when_database_is_down(env: dict[str, str]) -> None:
    result = cli({**env, "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}, "status")
    assert result.returncode == 1
    assert result.stderr.strip() == "error: not ready: database unavailable"


def test_status_refuses_with_pending_migrations(
    db: Database, env: dict[str, str], tmp_path: Path
) -> None:
    folder = tmp_path / "sql"
    shutil.copytree(sql_dir(), folder)
    (folder / "9999_future.sql").write_text("SELECT 1;")
    result = cli({**env, "TENANTD_SQL_DIR": str(folder)}, "status", "--json")
    assert result.returncode == 1
    assert json.loads(result.stdout)["migrations"]["pending"] == ["9999_future"]
    assert "migrations pending" in result.stderr


def test_failed_sweep_exits_1(
    db: Database, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(ctx: SweepContext) -> None:
        raise RuntimeError("disk on fire")

    def fake_registry() -> dict[str, Sweep]:
        return {"sessions": Sweep("sessions", "", broken)}

    monkeypatch.setattr("tenantd.cli.sweep.registered_sweeps", fake_registry)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = CliRunner().invoke(app, ["sweep", "sessions"])
    assert result.exit_code == 1
    assert "RuntimeError: disk on fire" in result.output


def test_env_example_documents_every_ops_knob() -> None:
    from tenantd.ops.config import DEFAULT_RATE_LIMITS, DEFAULT_SWEEP_INTERVALS, SECTIONS
    from tenantd.settings import read_env_file, validated

    example = Path(__file__).resolve().parents[2] / "config" / "tenantd.env.example"
    text = example.read_text()
    source = (Path(__file__).resolve().parents[2] / "tenantd" / "ops" / "config.py").read_text()
    names = set(re.findall(r'"((?:TENANTD|RATE_LIMIT)_[A-Z_]+)"', source))
    names |= {f"TENANTD_SWEEP_{n.upper()}_INTERVAL_SECONDS" for n in DEFAULT_SWEEP_INTERVALS}
    for scope in DEFAULT_RATE_LIMITS:
        for suffix in ("PER_IP", "PER_EMAIL", "WINDOW_SECONDS"):
            names.add(f"RATE_LIMIT_{scope.upper()}_{suffix}")
    missing = sorted(name for name in names if f"{name}=" not in text)
    assert not missing
    # The documented values are the defaults.
    documented = read_env_file(example)
    for section in SECTIONS:
        assert validated(section, documented) == validated(section, {}), section.__name__
