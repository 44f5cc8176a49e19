"""Moving users in and out: `tenantd users import` and `tenantd users export`.

Import rules: each line is one user in its own transaction (a failure leaves nothing of that
user written); a line that cannot be read is reported by number and skipped. The address is
the key: a new address creates the user (its name, verified flag, creation time, password
hash as exported, OIDC links, and for a verified user a personal account as at sign-up);
an address already here is never duplicated: only what it lacks is filled in (empty names,
the verified flag, a password when it has none, new links), so a re-run changes nothing.
`dry_run` does all of it and rolls every transaction back.
Imported hashes stay in their scheme until the first sign-in rehashes them (passwords.py).
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
import psycopg2.errors

from tenantd.accounts.provisioning import provision_personal_account
from tenantd.audit import log as audit
from tenantd.auth.transfer import queries
from tenantd.auth.transfer.formats import BadLine, HashOptions, ImportedUser, read_user
from tenantd.bundle import Services
from tenantd.db import Conn
from tenantd.identity import queries as identity_queries
from tenantd.identity.events import user_changed
from tenantd.settings import Settings

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 64 * 1024
EXPORT_BATCH = 1000

CREATED, UPDATED, UNCHANGED = "created", "updated", "unchanged"


class _DryRun(Exception):
    """Raised inside a dry run's transaction to roll it back."""


@dataclass
class ImportSummary:
    dry_run: bool = False
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (line number, why)
    warnings: list[tuple[int, str]] = field(default_factory=list)

    def line(self) -> str:
        """The one summary line the command always prints."""
        verb = "would import" if self.dry_run else "imported"
        return (
            f"{verb}: {self.created} created, {self.updated} updated, "
            f"{self.unchanged} unchanged, {len(self.skipped)} skipped"
            f"{', ' + str(len(self.warnings)) + ' warnings' if self.warnings else ''}"
            f"{' (dry run: nothing written)' if self.dry_run else ''}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "created": self.created,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "skipped": len(self.skipped),
            "warnings": len(self.warnings),
        }


async def import_users(
    services: Services,
    lines: Iterable[tuple[int, str]],
    *,
    fmt: str,
    dry_run: bool = False,
    options: HashOptions | None = None,
    progress: Callable[[], None] | None = None,
) -> ImportSummary:
    """Import JSON lines `(number, text)` of export format `fmt`; one transaction per user."""
    summary = ImportSummary(dry_run=dry_run)
    for number, text in lines:
        try:
            await _import_line(services, summary, number, text, fmt=fmt, options=options)
        finally:
            if progress is not None:
                progress()
    if not dry_run and (summary.created or summary.updated):
        async with services.db.transaction() as conn:
            await audit.record(
                conn,
                account_id=None,
                actor_user_id=None,
                action="users.import",
                data={"format": fmt, **summary.as_dict()},
            )
    log.info("users import: %s", summary.line())
    return summary


async def _import_line(
    services: Services,
    summary: ImportSummary,
    number: int,
    text: str,
    *,
    fmt: str,
    options: HashOptions | None,
) -> None:
    if not text.strip():
        return
    try:
        if len(text.encode()) > MAX_LINE_BYTES:
            raise BadLine("line too long")
        try:
            record = orjson.loads(text)
        except orjson.JSONDecodeError:
            raise BadLine("not JSON") from None
        user = read_user(record, fmt, options)
    except BadLine as exc:
        summary.skipped.append((number, str(exc)))
        return
    try:
        async with services.db.transaction() as conn:
            outcome, warnings = await apply_user(conn, services.settings, user)
            if summary.dry_run:
                raise _DryRun
    except _DryRun:
        pass
    except psycopg2.errors.UniqueViolation:
        # An OIDC link or the address taken by a concurrent writer: nothing of this user
        # was written; a re-run picks it up.
        summary.skipped.append((number, "conflicts with a concurrent change; run again"))
        return
    except (psycopg2.DataError, ValueError) as exc:
        # A value the database refuses (a NUL character, an out-of-range time): the
        # transaction rolled back, nothing of this user is written.
        summary.skipped.append((number, f"refused by the database: {type(exc).__name__}"))
        return
    summary.warnings.extend((number, w) for w in [*user.warnings, *warnings])
    if outcome == CREATED:
        summary.created += 1
    elif outcome == UPDATED:
        summary.updated += 1
    else:
        summary.unchanged += 1


async def apply_user(conn: Conn, settings: Settings, user: ImportedUser) -> tuple[str, list[str]]:
    """Create the user, or fill in what the existing one lacks (caller's transaction)."""
    await queries.lock_email(conn, user.email)
    user_id = await identity_queries.insert_imported_user(
        conn,
        email=user.email,
        first_name=user.first_name,
        last_name=user.last_name,
        verified=user.email_verified,
        created_at=user.created_at,
    )
    if user_id is None:
        return await _fill_in(conn, settings, user)
    _linked, warnings = await _link(conn, user_id, user)
    if user.password_hash:
        await identity_queries.set_password(conn, user_id=user_id, password_hash=user.password_hash)
    await user_changed(conn, "user.created", user_id)
    if user.email_verified:
        warnings += await _personal_account(conn, settings, user_id)
    return CREATED, warnings


async def _fill_in(conn: Conn, settings: Settings, user: ImportedUser) -> tuple[str, list[str]]:
    existing = await queries.lock_user_by_email(conn, user.email)
    assert existing is not None  # the insert found it
    user_id: uuid.UUID = existing["id"]
    if existing["deleted_at"] is not None:
        return UNCHANGED, ["a deleted user has this address: left as it is"]
    changed = await identity_queries.fill_names(
        conn, user_id, first=user.first_name, last=user.last_name
    )
    if user.email_verified and existing["email_verified_at"] is None:
        # The export vouches for the mailbox: as after an OpenID sign-in, what an unproven
        # sign-up chose here (its password, its pending links) is dropped.
        await identity_queries.claim_unverified_user(conn, user_id)
        await user_changed(conn, "user.email_verified", user_id, previous={"emailVerified": False})
        changed = True
    if user.password_hash and not await queries.has_password(conn, user_id):
        await identity_queries.set_password(conn, user_id=user_id, password_hash=user.password_hash)
        changed = True
    linked, warnings = await _link(conn, user_id, user)
    if user.email_verified:
        warnings += await _personal_account(conn, settings, user_id)
    return (UPDATED if changed or linked else UNCHANGED), warnings


async def _link(conn: Conn, user_id: uuid.UUID, user: ImportedUser) -> tuple[int, list[str]]:
    """Insert the OIDC links not there yet; one another user holds is reported, not taken."""
    linked, notes = 0, []
    for provider, subject in user.identities:
        outcome = await queries.insert_identity(
            conn, user_id=user_id, provider=provider, subject=subject, email=user.email
        )
        if outcome == "inserted":
            linked += 1
        elif outcome == "taken":
            notes.append(
                f"{provider} identity {subject} not linked: another user holds it, or this user"
                f" links another {provider} identity"
            )
    return linked, notes


async def _personal_account(conn: Conn, settings: Settings, user_id: uuid.UUID) -> list[str]:
    """A personal account as at sign-up; where the address's domain is claimed by another
    account, none (no join request is filed for an import: the user asks after sign-in)."""
    await conn.execute("SAVEPOINT import_account")
    provisioned = await provision_personal_account(conn, settings, user_id=user_id)
    if provisioned.conflict is None:
        await conn.execute("RELEASE SAVEPOINT import_account")
        return []
    await conn.execute("ROLLBACK TO SAVEPOINT import_account")
    return [f"domain {provisioned.conflict.domain} is claimed by another account: no account"]


async def export_users(services: Services) -> AsyncIterator[dict[str, Any]]:
    """Every live user in the `tenantd` import format, in id order, read in batches."""
    after: uuid.UUID | None = None
    while True:
        async with services.db.connection() as conn:
            rows = await queries.export_batch(conn, after=after, limit=EXPORT_BATCH)
        for row in rows:
            yield export_record(row)
        if len(rows) < EXPORT_BATCH:
            return
        after = rows[-1]["id"]


def export_record(row: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "email": row["email"],
        "firstName": row["first_name"],
        "lastName": row["last_name"],
        "emailVerified": row["email_verified_at"] is not None,
    }
    if row["password_hash"]:
        record["passwordHash"] = row["password_hash"]
    created: dt.datetime = row["created_at"]
    record["createdAt"] = created.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    return record
