"""`tenantd accounts`: list, show, set-plan, set-feature (operator view of tenancy)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

import typer

from tenantd.accounts import operator, restore
from tenantd.accounts.domain import Accounts
from tenantd.app.bundle import Domains
from tenantd.cli.common import console, fail, group, print_json, print_table, with_services
from tenantd.errors import AppError, ValidationFailed
from tenantd.mfa import sensitive

T = TypeVar("T")

app = group(
    "accounts",
    "Accounts (tenants): plans, seats and feature overrides.",
    "tenantd accounts set-plan 3f2b9c1e-8d4a-4b7e-9f00-2a1c5d6e7f80 team --seats 25",
)


def parse_id(value: str, what: str = "account id") -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        fail(f"not a valid {what}: {value!r}", 2)


def refused(error: AppError) -> str:
    if isinstance(error, ValidationFailed):
        return "; ".join(f"{k}: {v}" for k, v in error.fields.items())
    return error.message


def run_domains(work: Callable[[Domains], Awaitable[T]]) -> T:
    """Run a service call; a refused operation is one stderr line and exit 1."""
    try:
        return with_services(work)
    except AppError as error:
        fail(refused(error), 1)


def run(work: Callable[[Accounts], Awaitable[T]]) -> T:
    """`run_domains` of a call on the accounts domain."""
    return run_domains(lambda domains: work(domains.accounts))


@app.command("list")
def list_accounts(
    include_deleted: bool = typer.Option(
        False, "--include-deleted", help="Also list soft-deleted accounts."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """List accounts with plan, seat cap and seats used.

    Example: tenantd accounts list --json
    """
    rows = run(lambda s: operator.list_accounts(s, include_deleted=include_deleted))
    if as_json:
        print_json(
            [
                {
                    "id": str(r["id"]),
                    "name": r["name"],
                    "plan": r["plan"],
                    "seats": r["seats"],
                    "seatsUsed": r["seats_used"],
                    "claimedDomain": r["claimed_domain"],
                    "createdAt": r["created_at"],
                    "deletedAt": r["deleted_at"],
                }
                for r in rows
            ]
        )
        return
    print_table(
        "Accounts",
        ("id", "name", "plan", "seats", "used", "domain", "created", "deleted"),
        [
            (
                r["id"],
                r["name"],
                r["plan"],
                r["seats"],
                r["seats_used"],
                r["claimed_domain"],
                r["created_at"].strftime("%Y-%m-%d %H:%M"),
                r["deleted_at"].strftime("%Y-%m-%d %H:%M") if r["deleted_at"] else None,
            )
            for r in rows
        ],
    )


@app.command()
def show(
    account_id: str = typer.Argument(..., metavar="ID", help="Account id (UUID)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """Show one account: plan, seats, features and members. Exit 1 if it does not exist.

    Example: tenantd accounts show 3f2b9c1e-8d4a-4b7e-9f00-2a1c5d6e7f80
    """
    key = parse_id(account_id)
    detail = run(lambda s: operator.show_account(s, key))
    if as_json:
        print_json(detail)
        return
    fields = [
        ("id", detail["id"]),
        ("name", detail["name"]),
        ("plan", detail["plan"]),
        (
            "seats",
            f"{detail['seatsUsed']} used of {detail['seats']}"
            + (" (override)" if detail["seatsOverride"] is not None else ""),
        ),
        ("owner", detail["owner"]),
        ("claimed domain", detail["claimedDomain"]),
        ("pending invitations", detail["pendingInvitations"]),
        ("created", detail["createdAt"]),
        ("deleted", detail["deletedAt"]),
        (
            "features",
            ", ".join(f"{k}={'on' if v else 'off'}" for k, v in detail["features"].items()),
        ),
    ]
    print_table(f"Account {detail['name']}", ("field", "value"), fields)
    print_table(
        "Members",
        ("user id", "email", "role"),
        [(m["userId"], m["email"], m["role"]) for m in detail["members"]],
    )


@app.command("set-plan")
def set_plan(
    account_id: str = typer.Argument(..., metavar="ID", help="Account id (UUID)."),
    plan: str = typer.Argument(..., metavar="PLAN", help="Plan code: free, team, business, ..."),
    seats: int | None = typer.Option(
        None, "--seats", min=0, help="Seat cap override; omitted: the plan's own seat count."
    ),
) -> None:
    """Put an account on a plan. A downgrade removes no one; it blocks new members.

    Example: tenantd accounts set-plan 3f2b9c1e-8d4a-4b7e-9f00-2a1c5d6e7f80 team --seats 25
    """
    key = parse_id(account_id)
    run(lambda s: operator.set_plan(s, key, plan=plan, seats=seats))
    extra = f" with {seats} seats" if seats is not None else ""
    console.print(f"account {key} is on plan {plan}{extra}")


@app.command("set-feature")
def set_feature(
    account_id: str = typer.Argument(..., metavar="ID", help="Account id (UUID)."),
    feature: str = typer.Argument(
        ..., metavar="FEATURE", help="Feature name, e.g. team_invitations."
    ),
    state: str = typer.Argument(..., metavar="on|off", help="on or off."),
) -> None:
    """Override one feature of an account, whatever its plan says.

    Example: tenantd accounts set-feature 3f2b9c1e-8d4a-4b7e-9f00-2a1c5d6e7f80 team_invitations on
    """
    key = parse_id(account_id)
    if state not in ("on", "off"):
        fail(f"state must be on or off, got {state!r}", 2)
    enabled = state == "on"
    run(lambda s: operator.set_feature(s, key, feature=feature, enabled=enabled))
    console.print(f"feature {feature} is {state} for account {key}")


@app.command("restore")
def restore_account(
    account_id: str = typer.Argument(..., metavar="ID", help="Account id (UUID)."),
) -> None:
    """Restore a soft-deleted account within its grace period. Exit 1 when it is live, purged
    or its email domain was claimed by another account meanwhile.

    Example: tenantd accounts restore 3f2b9c1e-8d4a-4b7e-9f00-2a1c5d6e7f80
    """
    key = parse_id(account_id)
    row = run(lambda s: restore.restore_account(s, key, actor=sensitive.OPERATOR))
    console.print(f"account {key} ({row['name']}) is restored")
