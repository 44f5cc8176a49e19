"""`tenantd invitations`: list pending invitations of an account, revoke one."""

from __future__ import annotations

import typer

from tenantd.accounts import operator
from tenantd.accounts.schemas import InvitationOut
from tenantd.cli.accounts import parse_id, run
from tenantd.cli.common import console, group, print_json, print_table

app = group(
    "invitations",
    "Pending invitations.",
    "tenantd invitations list 3f2b9c1e-8d4a-4b7e-9f00-2a1c5d6e7f80",
)


@app.command("list")
def list_invitations(
    account_id: str = typer.Argument(..., metavar="ACCOUNT_ID", help="Account id (UUID)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """List the pending invitations of an account. Exit 1 if the account does not exist.

    Example: tenantd invitations list 3f2b9c1e-8d4a-4b7e-9f00-2a1c5d6e7f80 --json
    """
    key = parse_id(account_id)
    rows = run(lambda s: operator.list_invitations(s, key))
    if as_json:
        print_json([InvitationOut.of(r) for r in rows])  # the API's own answer
        return
    print_table(
        "Pending invitations",
        ("id", "email", "role", "created", "expires"),
        [
            (
                r["id"],
                r["email"],
                r["role"],
                r["created_at"].strftime("%Y-%m-%d %H:%M"),
                r["expires_at"].strftime("%Y-%m-%d %H:%M"),
            )
            for r in rows
        ],
    )


@app.command()
def revoke(
    invitation_id: str = typer.Argument(..., metavar="INVITATION_ID", help="Invitation id."),
) -> None:
    """Revoke a pending invitation (its link stops working). Exit 1 if unknown or accepted.

    Example: tenantd invitations revoke 9a7c0d52-1b3e-4f6a-8c9d-0e1f2a3b4c5d
    """
    key = parse_id(invitation_id, "invitation id")
    row = run(lambda s: operator.revoke_invitation(s, key))
    console.print(f"invitation {key} to {row['email']} is revoked")
