"""What the root `tenantd` callback records for the command that runs (`--env-file`).

Kept apart from `common` so that `tenantd --help` loads no server module."""

from __future__ import annotations


class CliState:
    env_file: str | None = None  # --env-file of the root command
    loaded_env_file: str | None = None  # the file the command's settings were read from


state = CliState()
