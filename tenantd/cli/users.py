"""`tenantd users`: operator actions on one user."""

from __future__ import annotations

import base64
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from tenantd import audit
from tenantd.auth.transfer import service as transfer
from tenantd.auth.transfer.formats import FORMATS, HashOptions
from tenantd.auth.transfer.service import ImportSummary
from tenantd.bundle import Services
from tenantd.cli.accounts import run
from tenantd.cli.common import console, fail
from tenantd.identity.passwords import FirebaseScrypt
from tenantd.mfa import service as mfa

app = typer.Typer(
    name="users",
    help="Users: operator actions, import and export.\n\n"
    "Example: tenantd users import users.jsonl --format auth0 --dry-run",
    no_args_is_help=True,
)


@app.command("mfa-reset")
def mfa_reset(email: str = typer.Argument(..., help="The user's email address.")) -> None:
    """Remove the user's authenticator app, passkeys and recovery codes (audited; the user
    is emailed).

    Example: tenantd users mfa-reset ada@example.com
    """

    async def work(services: Services) -> str:
        async with services.db.transaction() as conn:
            user_id = await mfa.reset_user(conn, email=email)
            await audit.record(
                conn,
                account_id=None,
                actor_user_id=None,
                action="user.mfa_reset",
                target=str(user_id),
                data={"via": "cli"},
            )
        await mfa.mail_reset_notice(services, user_id)
        return str(user_id)

    user_id = run(work)
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
