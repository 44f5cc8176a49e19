"""The `tenantd` command."""

from __future__ import annotations

import sys

import typer

from tenantd.cli.lazy import LazyGroup
from tenantd.cli.state import state

app = typer.Typer(
    name="tenantd",
    help="tenantd: accounts, sessions, notifications and email suppression.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=LazyGroup,  # each command's module is imported only when that command runs
    rich_markup_mode=None,  # plain help: rich's help renderer alone loads ~170 modules
)


@app.callback()
def root(
    env_file: str | None = typer.Option(
        None, "--env-file", help="KEY=value file; the process environment wins over it."
    ),
) -> None:
    state.env_file = env_file


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
