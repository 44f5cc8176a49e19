"""CLI exit codes and error lines (INTERFACE.md): usage errors are one stderr line, exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "args",
    [["nosuch"], ["accounts", "show"], ["suppress", "add"], ["serve", "--port", "notanumber"]],
)
def test_usage_errors_are_one_plain_line_and_exit_2(args: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tenantd", *args], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "╭" not in result.stderr and "Traceback" not in result.stderr


def test_help_exits_0() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tenantd", "--help"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0
    for command in ("serve", "migrate", "sweep", "suppress", "accounts", "invitations", "notify"):
        assert command in result.stdout


def test_configuration_errors_are_one_line(tmp_path: object, migrated: str) -> None:
    import os

    env = {
        **os.environ,
        "DATABASE_URL": migrated,
        "TENANTD_DATA_DIR": str(tmp_path),
        "SECRET_KEY": "k" * 40,
        "EMAIL_PROVIDER": "postmark",  # without POSTMARK_SERVER_TOKEN
    }
    result = subprocess.run(
        [sys.executable, "-m", "tenantd", "suppress", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: EMAIL_PROVIDER=postmark requires POSTMARK_SERVER_TOKEN"
    ]
