"""The `tenantd` command."""

from __future__ import annotations

import sys

import typer

from tenantd.cli import accounts as accounts_cmd
from tenantd.cli import apikeys as apikeys_cmd
from tenantd.cli import audit as audit_cmd
from tenantd.cli import invitations as invitations_cmd
from tenantd.cli import keys as keys_cmd
from tenantd.cli import notify as notify_cmd
from tenantd.cli import serve as serve_cmd
from tenantd.cli import status as status_cmd
from tenantd.cli import suppress as suppress_cmd
from tenantd.cli import sweep as sweep_cmd
from tenantd.cli import users as users_cmd
from tenantd.cli import vapid as vapid_cmd
from tenantd.cli import webhooks as webhooks_cmd
from tenantd.cli.common import state

app = typer.Typer(
    name="tenantd",
    help="tenantd: accounts, sessions, notifications and email suppression.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def root(
    env_file: str | None = typer.Option(
        None, "--env-file", help="KEY=value file; the process environment wins over it."
    ),
) -> None:
    state.env_file = env_file


app.command()(serve_cmd.serve)
app.command()(serve_cmd.migrate)
app.command()(sweep_cmd.sweep)
app.command()(status_cmd.status)
app.add_typer(suppress_cmd.app, name="suppress")
app.add_typer(notify_cmd.app, name="notify")
app.add_typer(vapid_cmd.app, name="vapid")
app.add_typer(accounts_cmd.app, name="accounts")
app.add_typer(invitations_cmd.app, name="invitations")
app.add_typer(keys_cmd.app, name="keys")
app.add_typer(webhooks_cmd.app, name="webhooks")
app.add_typer(apikeys_cmd.app, name="api-keys")
app.add_typer(users_cmd.app, name="users")
app.add_typer(audit_cmd.app, name="audit")


def main() -> None:
    """Entry point: usage errors are one plain stderr line and exit 2 (INTERFACE.md)."""
    # Typer vendors Click; its exception classes live in typer._click.
    from typer._click import exceptions as click  # noqa: PLC0415 (typer's vendored Click)

    try:
        result = app(standalone_mode=False)
    except click.NoArgsIsHelpError as error:
        sys.stderr.write(error.format_message() + "\n")
        sys.exit(2)
    except click.UsageError as error:
        hint = f" (see '{error.ctx.command_path} --help')" if error.ctx else ""
        sys.stderr.write(f"error: {error.format_message()}{hint}\n")
        sys.exit(2)
    except click.ClickException as error:
        sys.stderr.write(f"error: {error.format_message()}\n")
        sys.exit(error.exit_code)
    except typer.Abort:
        sys.stderr.write("error: aborted\n")
        sys.exit(1)
    sys.exit(result if isinstance(result, int) else 0)
