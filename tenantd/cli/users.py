"""`tenantd users`: operator actions on one user."""

from __future__ import annotations

import base64
import datetime as dt
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import orjson
import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from tenantd import audit
from tenantd.auth.admin import service as admin
from tenantd.auth.domain import Auth
from tenantd.auth.transfer import service as transfer
from tenantd.auth.transfer.formats import FORMATS, HashOptions
from tenantd.auth.transfer.service import ImportSummary
from tenantd.bundle import Services
from tenantd.cli.accounts import run_domains
from tenantd.cli.common import console, fail, group
from tenantd.identity.passwords import FirebaseScrypt
from tenantd.mfa import service as mfa
from tenantd.mfa.domain import Mfa
from tenantd.mfa.sensitive import OPERATOR

T = TypeVar("T")


def run(work: Callable[[Auth], Awaitable[T]]) -> T:
    """`run_domains` of a call on the auth domain."""
    return run_domains(lambda domains: work(domains.auth))


app = group(
    "users",
    "Users: find, disable, delete, impersonate; import and export.",
    "tenantd users list --query ada --json",
)


@app.command("mfa-reset")
def mfa_reset(email: str = typer.Argument(..., help="The user's email address.")) -> None:
    """Remove the user's authenticator app, passkeys and recovery codes (audited; the user
    is emailed).

    Example: tenantd users mfa-reset ada@example.com
    """

    async def work(services: Mfa) -> str:
        async with services.db.transaction() as conn:
            user_id = await mfa.reset_user(conn, email=email)
            await audit.record_user(
                conn,
                user_id,
                "user.mfa_reset",
                data={"via": "cli"},
            )
        await mfa.mail_reset_notice(services, user_id)
        return str(user_id)

    user_id = run_domains(lambda domains: work(domains.mfa))
    console.print(f"MFA reset for user {user_id}; the user was emailed")


FORMAT_HELP = "Export format: tenantd, clerk, auth0 or supabase."


def _firebase_options(
    signer_key: str | None, salt_separator: str | None, rounds: int | None, mem_cost: int | None
) -> HashOptions:
    given = [v is not None for v in (signer_key, salt_separator, rounds, mem_cost)]
    if not any(given):
        return HashOptions()
    if not all(given):
        fail(
            "--firebase-signer-key, --firebase-salt-separator, --firebase-rounds and"
            " --firebase-mem-cost go together",
            2,
        )
    try:
        config = FirebaseScrypt(
            signer_key=base64.b64decode(signer_key or "", validate=True),
            salt_separator=base64.b64decode(salt_separator or "", validate=True),
            rounds=rounds or 0,
            mem_cost=mem_cost or 0,
        )
    except ValueError:
        fail("--firebase-signer-key and --firebase-salt-separator are base64", 2)
    return HashOptions(firebase=config)


@app.command("import")
def import_users(
    file: Path = typer.Argument(
        ..., help="JSON lines, one user a line.", exists=True, dir_okay=False, readable=True
    ),
    fmt: str = typer.Option("tenantd", "--format", help=FORMAT_HELP),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Report what would change; write nothing."
    ),
    firebase_signer_key: str | None = typer.Option(
        None, "--firebase-signer-key", help="Firebase's base64 signer key (scrypt-firebase)."
    ),
    firebase_salt_separator: str | None = typer.Option(
        None, "--firebase-salt-separator", help="Firebase's base64 salt separator."
    ),
    firebase_rounds: int | None = typer.Option(
        None, "--firebase-rounds", help="Firebase's rounds."
    ),
    firebase_mem_cost: int | None = typer.Option(
        None, "--firebase-mem-cost", help="Firebase's memory cost."
    ),
) -> None:
    """Import users from an export file (JSON lines).

    Names, verified flags, OIDC links and password hashes (bcrypt, argon2, scrypt-firebase,
    pbkdf2_sha256), rehashed to argon2id at each user's first sign-in. A re-run changes
    nothing; bad lines are reported by number and skipped.

    Example: tenantd users import users.jsonl --format clerk --dry-run
    """
    if fmt not in FORMATS:
        fail(f"--format must be one of {', '.join(FORMATS)}", 2)
    options = _firebase_options(
        firebase_signer_key, firebase_salt_separator, firebase_rounds, firebase_mem_cost
    )
    with file.open(encoding="utf-8", errors="replace") as handle:
        total = sum(1 for _ in handle)

    def numbered() -> Iterator[tuple[int, str]]:
        with file.open(encoding="utf-8", errors="replace") as handle:
            yield from enumerate(handle, start=1)

    async def work(services: Services) -> ImportSummary:
        if not console.is_terminal:
            return await transfer.import_users(
                services, numbered(), fmt=fmt, dry_run=dry_run, options=options
            )
        with Progress(
            TextColumn("importing"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=True,
        ) as bar:
            task = bar.add_task("import", total=total)
            return await transfer.import_users(
                services,
                numbered(),
                fmt=fmt,
                dry_run=dry_run,
                options=options,
                progress=lambda: bar.advance(task),
            )

    summary = run(work)
    problems = [(n, f"skipped: {why}") for n, why in summary.skipped] + summary.warnings
    for number, note in sorted(problems, key=lambda item: item[0]):
        sys.stderr.write(f"line {number}: {note}\n")
    sys.stdout.write(summary.line() + "\n")


@app.command("export")
def export_users(
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write to this file (default: standard output)."
    ),
) -> None:
    """Write every user as JSON lines in the `tenantd` import format.

    Password hashes are included: keep the file secret.

    Example: tenantd users export -o users.jsonl
    """

    async def work(services: Services) -> int:
        count = 0
        target = output.open("wb") if output is not None else sys.stdout.buffer
        try:
            async for record in transfer.export_users(services):
                target.write(orjson.dumps(record) + b"\n")
                count += 1
        finally:
            if output is not None:
                target.close()
            else:
                target.flush()
        return count

    count = run(work)
    sys.stderr.write(f"exported {count} users\n")


# -- administration (issue 28): the same service functions as /api/v1/admin/users -------------

WHO_HELP = "The user's email address (or id)."


def _print_json(value: object) -> None:
    """The API's own encoding (ISO dates, camelCase keys), so both read the same."""
    sys.stdout.buffer.write(orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n")


async def _user_id(services: Services, who: str) -> uuid.UUID:
    try:
        return uuid.UUID(who)
    except ValueError:
        return await admin.user_id_by_email(services, who)


def _as_operator(who: str, call: Callable[..., Awaitable[T]], **kwargs: Any) -> T:
    """`call(services, OPERATOR, user_id=..., **kwargs)` for the user `who` names (id or
    email), run as one CLI service call."""

    async def work(services: Services) -> T:
        return await call(services, OPERATOR, user_id=await _user_id(services, who), **kwargs)

    return run(work)


@app.command("list")
def list_users(
    query: str | None = typer.Option(None, "--query", "-q", help="Part of an email or name."),
    limit: int = typer.Option(50, "--limit", min=1, max=admin.MAX_LIMIT, help="Users a page."),
    cursor: str | None = typer.Option(None, "--cursor", help="The next page's cursor."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """List users newest first, or search them by email and names.

    Example: tenantd users list --query ada --json
    """
    page = run(lambda s: admin.list_users(s, query=query, cursor=cursor, limit=limit))
    items = [admin.user_json(row) for row in page.items]
    if as_json:
        _print_json({"items": items, "nextCursor": page.next_cursor})
        return
    _print_columns(
        ["id", "email", "verified", "disabled", "created", "last sign-in"],
        [
            [
                str(item["id"]),
                str(item["email"]),
                _day(item["emailVerifiedAt"]),
                _day(item["disabledAt"]),
                _day(item["createdAt"]),
                _day(item["lastSignInAt"]),
            ]
            for item in items
        ],
    )
    if page.next_cursor:
        sys.stderr.write(f"more: tenantd users list --cursor {page.next_cursor}\n")


def _print_columns(header: list[str], rows: list[list[str]]) -> None:
    """Plain aligned columns that never cut an id or an address, whatever the terminal."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=False)]
    for row in [header, *rows]:
        line = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        sys.stdout.write(line.rstrip() + "\n")


def _day(value: object) -> str:
    return value.isoformat(timespec="seconds") if isinstance(value, dt.datetime) else ""


@app.command("show")
def show_user(
    who: str = typer.Argument(..., help=WHO_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of lines."),
) -> None:
    """One user: verification, disabled, last sign-in, memberships, sign-in methods.

    Example: tenantd users show ada@example.com
    """

    async def work(services: Services) -> dict[str, object]:
        return await admin.show_user(services, user_id=await _user_id(services, who))

    user = run(work)
    if as_json:
        _print_json(user)
        return
    for key, value in user.items():
        if isinstance(value, list):
            console.print(f"{key}:")
            for entry in value:
                console.print("  " + ", ".join(f"{k}={v}" for k, v in entry.items()))
        else:
            console.print(f"{key}: {'' if value is None else value}")


@app.command("disable")
def disable_user(who: str = typer.Argument(..., help=WHO_HELP)) -> None:
    """End every session of the user and refuse sign-in (USER_DISABLED) until enabled.

    Example: tenantd users disable ada@example.com
    """
    _as_operator(who, admin.disable_user)
    console.print(f"disabled {who}: every session ended")


@app.command("enable")
def enable_user(who: str = typer.Argument(..., help=WHO_HELP)) -> None:
    """Let a disabled user sign in again.

    Example: tenantd users enable ada@example.com
    """
    _as_operator(who, admin.enable_user)
    console.print(f"enabled {who}")


@app.command("delete")
def delete_user(
    who: str = typer.Argument(..., help=WHO_HELP),
    yes: bool = typer.Option(False, "--yes", help="Do not ask for confirmation."),
) -> None:
    """Delete the user as self-delete does (address released, sessions ended, anonymised
    after the grace window).

    Example: tenantd users delete ada@example.com --yes
    """
    if not yes and not typer.confirm(f"Delete {who}?"):
        fail("not deleted", 1)

    _as_operator(who, admin.delete_user)
    console.print(f"deleted {who}")


@app.command("resend-verification")
def resend_verification(who: str = typer.Argument(..., help=WHO_HELP)) -> None:
    """Mail the user a fresh verification link.

    Example: tenantd users resend-verification ada@example.com
    """
    _as_operator(who, admin.resend_verification)
    console.print(f"verification link queued for {who}")


@app.command("impersonate")
def impersonate(
    who: str = typer.Argument(..., help=WHO_HELP),
    reason: str = typer.Option(..., "--reason", help="Why (written to the audit log)."),
) -> None:
    """Print a one-time link that signs in as the user for 15 minutes at most (audited).

    Example: tenantd users impersonate ada@example.com --reason "ticket 4711"
    """
    sys.stdout.write(_as_operator(who, admin.impersonate, reason=reason) + "\n")
