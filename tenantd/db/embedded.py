"""A private PostgreSQL cluster for development and tests (used when DATABASE_URL is unset).

PostgreSQL refuses to run as root, so when uid is 0 the server binaries run as the
`postgres` OS user and the cluster directory is handed to that user.
"""

from __future__ import annotations

import glob
import logging
import os
import pwd
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg2

log = logging.getLogger(__name__)

DATABASE_NAME = "tenantd"


class EmbeddedError(RuntimeError):
    """The private cluster could not be created or started."""


def find_pg_bin() -> Path:
    """Directory holding initdb/pg_ctl: PATH first, then /usr/lib/postgresql/<newest>/bin."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).resolve().parent  # PATH entries are often symlinks
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
    )
    for candidate in reversed(candidates):
        if (Path(candidate) / "initdb").exists():
            return Path(candidate)
    raise EmbeddedError(
        "PostgreSQL server binaries not found: install postgresql or set DATABASE_URL"
    )


@dataclass
class EmbeddedCluster:
    root: Path  # $TENANTD_DATA_DIR/pg
    # Extra server options, e.g. "-c shared_buffers=2GB" for the benchmark's large data set.
    options: str = ""

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root / "run"

    @property
    def url(self) -> str:
        return f"postgresql:///{DATABASE_NAME}?host={self.socket_dir}&user=postgres"

    def _as_owner(self, args: list[str]) -> list[str]:
        if os.geteuid() != 0:
            return args
        return ["runuser", "-u", "postgres", "--", *args]

    def _run(self, args: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self._as_owner(args), capture_output=True, text=True, check=check, timeout=120
        )

    def _prepare_dirs(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            for path in (self.root, self.socket_dir):
                os.chown(path, owner.pw_uid, owner.pw_gid)
            # The postgres user must be able to reach the cluster through its parents.
            parent = self.root.parent
            while parent != parent.parent:
                mode = parent.stat().st_mode
                if not mode & 0o001:
                    os.chmod(parent, mode | 0o001)
                parent = parent.parent

    def is_running(self) -> bool:
        if not (self.data / "PG_VERSION").exists():
            return False
        result = self._run(
            [str(find_pg_bin() / "pg_ctl"), "status", "-D", str(self.data)], check=False
        )
        return result.returncode == 0

    def start(self) -> bool:
        """Create if needed and start; return True when this call started the server."""
        bin_dir = find_pg_bin()
        self._prepare_dirs()
        if not (self.data / "PG_VERSION").exists():
            log.info("creating private PostgreSQL cluster in %s", self.data)
            result = self._run(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--no-sync",
                ],
                check=False,
            )
            if result.returncode != 0:
                raise EmbeddedError(f"initdb failed: {result.stderr.strip()}")
        if self.is_running():
            return False
        options = (
            f"-c listen_addresses='' -c unix_socket_directories='{self.socket_dir}' "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=300 -c shared_buffers=128MB"
        )
        if self.options:
            options = f"{options} {self.options}"
        result = self._run(
            [
                str(bin_dir / "pg_ctl"),
                "start",
                "-w",
                "-t",
                "60",
                "-D",
                str(self.data),
                "-l",
                str(self.root / "postgres.log"),
                "-o",
                options,
            ],
            check=False,
        )
        if result.returncode != 0:
            log_tail = ""
            log_path = self.root / "postgres.log"
            if log_path.exists():
                log_tail = log_path.read_text()[-2000:]
            raise EmbeddedError(f"pg_ctl start failed: {result.stderr.strip()} {log_tail}")
        self._ensure_database()
        return True

    def _ensure_database(self) -> None:
        last_error: Exception | None = None
        for _ in range(100):
            try:
                conn = psycopg2.connect(
                    host=str(self.socket_dir), user="postgres", dbname="postgres"
                )
                break
            except psycopg2.OperationalError as error:  # still starting up
                last_error = error
                time.sleep(0.1)
        else:
            raise EmbeddedError(f"cannot connect to the private cluster: {last_error}")
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE_NAME,))
                if cur.fetchone() is None:
                    cur.execute(f"CREATE DATABASE {DATABASE_NAME}")
        finally:
            conn.close()

    def stop(self) -> None:
        if self.is_running():
            self._run(
                [str(find_pg_bin() / "pg_ctl"), "stop", "-m", "fast", "-w", "-D", str(self.data)],
                check=False,
            )
