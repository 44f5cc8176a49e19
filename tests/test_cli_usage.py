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
