"""The table of `tenantd` commands, each loaded only when it runs.

A command module imports the server (services, database, domains: about a thousand modules);
`tenantd --help` needs none of it. So the root group knows each command by name, the module
that defines it and its one-line help, and imports that module (by name, with importlib) only
when the command is resolved to run or to show its own `--help`. `tests/cli/test_lazy.py`
checks that every line of this table matches the command it names.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import typer

# Typer vendors Click; its Command and Context classes live in typer._click.
from typer import _click as click
from typer.core import TyperCommand, TyperGroup
from typer.main import get_command, get_group


@dataclass(frozen=True)
class LazyCommand:
    """`tenantd <name>`: `attribute` of `module`, a Typer app (a group of verbs) or a function
    (one command); `help` is what `tenantd --help` lists beside the name."""

    name: str
    module: str
    attribute: str
    help: str

    def load(self) -> click.Command:
        """Import the module and build its Click command."""
        target = getattr(importlib.import_module(self.module), self.attribute)
        if isinstance(target, typer.Typer):
            command: click.Command = get_group(target)
        else:
            single = typer.Typer(add_completion=False)
            single.command(self.name)(target)
            command = get_command(single)
        command.name = self.name
        return command


COMMANDS: tuple[LazyCommand, ...] = (
    LazyCommand(
        "serve", "tenantd.cli.serve", "serve", "Serve the HTTP API, job runner and scheduler."
    ),
    LazyCommand(
        "migrate",
        "tenantd.cli.serve",
        "migrate",
        "Apply pending SQL migrations (safe to run from several hosts at once).",
    ),
    LazyCommand(
        "sweep",
        "tenantd.cli.sweep",
        "sweep",
        "Run the sweeps once (for cron), as the scheduler of `tenantd serve` does.",
    ),
    LazyCommand(
        "status",
        "tenantd.cli.status",
        "status",
        "Show version, database, migrations, queue depth, channels, sweeps and instances.",
    ),
    LazyCommand(
        "suppress",
        "tenantd.cli.suppress",
        "app",
        "The email suppression list: every send consults it first.",
    ),
    LazyCommand("notify", "tenantd.cli.notify", "app", "Notifications."),
    LazyCommand("vapid", "tenantd.cli.vapid", "app", "Web push VAPID keys."),
    LazyCommand(
        "accounts",
        "tenantd.cli.accounts",
        "app",
        "Accounts (tenants): plans, seats and feature overrides.",
    ),
    LazyCommand("invitations", "tenantd.cli.invitations", "app", "Pending invitations."),
    LazyCommand(
        "keys",
        "tenantd.cli.keys",
        "app",
        "Access-token signing keys: every kid with its state; rotate; retire.",
    ),
    LazyCommand(
        "webhooks",
        "tenantd.cli.webhooks",
        "app",
        "Endpoints that receive signed events (user.created, membership.revoked, ...).",
    ),
    LazyCommand(
        "api-keys",
        "tenantd.cli.apikeys",
        "app",
        "Server API keys (scopes: events:read, notifications:send, webhooks:manage,"
        " sessions:introspect, notifications:manage, users:manage).",
    ),
    LazyCommand(
        "users",
        "tenantd.cli.users",
        "app",
        "Users: find, disable, delete, impersonate; import and export.",
    ),
    LazyCommand(
        "audit", "tenantd.cli.audit", "app", "The audit log: export it, verify its hash chains."
    ),
    LazyCommand(
        "directories",
        "tenantd.cli.directories",
        "app",
        "SCIM directories of an account (Okta, Entra ID, ...): each has a bearer token.",
    ),
)


class LazyGroup(TyperGroup):
    """The root group: lists `COMMANDS` from the table, loads one when it is resolved."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.lazy = {entry.name: entry for entry in COMMANDS}
        self.listing = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*self.commands, *(name for name in self.lazy if name not in self.commands)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        entry = self.lazy.get(cmd_name)
        if entry is None:
            return None
        if self.listing:  # the root's help: name and one line, nothing imported
            return TyperCommand(entry.name, help=entry.help)
        self.commands[cmd_name] = entry.load()
        return self.commands[cmd_name]

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self.listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self.listing = False
