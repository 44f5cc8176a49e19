"""`tenantd users`: operator actions on one user."""

from __future__ import annotations

import typer

from tenantd import audit
from tenantd.cli.accounts import run
from tenantd.cli.common import console
from tenantd.mfa import service as mfa
from tenantd.services import Services

app = typer.Typer(
    name="users",
    help="Users: operator actions.\n\nExample: tenantd users mfa-reset ada@example.com",
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
