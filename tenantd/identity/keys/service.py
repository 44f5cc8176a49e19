"""The rules of signing keys: one signing key for every instance, a next key published at
least one JWKS cache lifetime before it signs, a superseded key published until the last
token it signed has expired, automatic rotation, and loading the in-process keyring.

Every change runs in the caller's transaction under `queries.lock_keys`, so start-up of
several instances, the sweep and the CLI never create two keys where one was meant.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from tenantd.db import Conn, Row
from tenantd.errors import Conflict, NotFound
from tenantd.identity.keys import material, queries
from tenantd.identity.keys.keyring import HS256, Keyring, SigningKey
from tenantd.identity.settings import IdentitySettings
from tenantd.identity.tokens import ACCESS_TTL_SECONDS
from tenantd.settings import Settings

log = logging.getLogger(__name__)

JWKS_MAX_AGE_SECONDS = 300  # Cache-Control of /.well-known/jwks.json
# A next key signs this long after it is published: one JWKS cache lifetime, plus a minute
# for clocks and for an instance that missed the NOTIFY and reloads on its timer.
PUBLISH_LEAD = dt.timedelta(seconds=JWKS_MAX_AGE_SECONDS + 60)
# A retired key stays published until the last token it signed has expired (plus clock slack).
TOKEN_LIFETIME = dt.timedelta(seconds=ACCESS_TTL_SECONDS + 60)
EXPIRED_ROWS_KEPT = dt.timedelta(days=30)  # `keys list` still shows them this long


def _ts(value: dt.datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def signing_key_of(row: Row, secret_key: str) -> SigningKey:
    """A stored row as the keyring holds it (the private part decrypted, if there is one)."""
    jwk = {k: v for k, v in dict(row["public_jwk"]).items() if k not in material.PRIVATE_MEMBERS}
    stored = row["private_key"]
    private = (
        material.decrypt_private(secret_key, row["kid"], bytes(stored))
        if stored is not None
        else None
    )
    if stored is not None and private is None:
        log.error("signing key %s cannot be decrypted: SECRET_KEY differs", row["kid"])
    return SigningKey(
        kid=row["kid"],
        alg=row["alg"],
        jwk=jwk,
        public=material.public_key(row["alg"], jwk),
        private=private,
        published_at=row["published_at"].timestamp(),
        signing_from=row["signing_from"].timestamp(),
        retired_at=_ts(row["retired_at"]),
        not_after=_ts(row["not_after"]),
    )


async def load(conn: Conn, keyring: Keyring) -> None:
    """Read the published keys into the keyring (and when HS256 tokens stop being trusted)."""
    rows = await queries.published_keys(conn)
    first = await queries.first_signing_from(conn)
    hs256_until = None if first is None else first.timestamp() + ACCESS_TTL_SECONDS
    keyring.replace(
        [signing_key_of(row, keyring.secret_key) for row in rows], hs256_until=hs256_until
    )


def state_of(row: Row) -> str:
    """next | current | retired | expired, from the timestamps (row["now"] is the clock)."""
    now = row["now"]
    if row["not_after"] is not None and row["not_after"] <= now:
        return "expired"
    if row["retired_at"] is not None and row["retired_at"] <= now:
        return "retired"
    return "current" if row["signing_from"] <= now else "next"


@dataclass(frozen=True)
class KeyView:
    kid: str
    alg: str
    state: str
    has_private_key: bool
    published_at: dt.datetime
    signing_from: dt.datetime
    retired_at: dt.datetime | None
    not_after: dt.datetime | None


def view_of(row: Row) -> KeyView:
    return KeyView(
        kid=row["kid"],
        alg=row["alg"],
        state=state_of(row),
        has_private_key=row["private_key"] is not None,
        published_at=row["published_at"],
        signing_from=row["signing_from"],
        retired_at=row["retired_at"],
        not_after=row["not_after"],
    )


async def list_keys(conn: Conn) -> list[KeyView]:
    """Every kid with its state, oldest first."""
    return [view_of(row) for row in await queries.all_keys(conn)]


async def _insert(
    conn: Conn, settings: Settings, *, alg: str, signing_from: dt.datetime | None
) -> Row:
    new = material.generate(alg, settings.secret_key)
    return await queries.insert_key(
        conn,
        kid=new.kid,
        alg=new.alg,
        public_jwk=new.public_jwk,
        private_key=new.encrypted_private,
        signing_from=signing_from,
    )


def _usable(row: Row, settings: Settings) -> bool:
    stored = row["private_key"]
    return stored is not None and (
        material.decrypt_private(settings.secret_key, row["kid"], bytes(stored)) is not None
    )


async def ensure(conn: Conn, settings: Settings, *, rotate_when_due: bool = True) -> str | None:
    """Make sure a key signs (first start, or SECRET_KEY changed: one that signs at once) and
    rotate when the current key is older than ACCESS_TOKEN_KEY_ROTATION_DAYS or of another
    algorithm than ACCESS_TOKEN_ALG. Returns what it did (None: nothing). Run in a transaction."""
    if settings.section(IdentitySettings).access_token_alg == HS256:
        return None
    await queries.lock_keys(conn)
    rows = await queries.all_keys(conn)
    current = [r for r in rows if state_of(r) == "current" and _usable(r, settings)]
    pending = [r for r in rows if state_of(r) == "next" and _usable(r, settings)]
    if not current:
        # A current key we cannot decrypt (SECRET_KEY changed) signs nothing from now on; it
        # stays published until tokens it signed have expired.
        for row in rows:
            if state_of(row) == "current" and row["retired_at"] is None:
                await queries.schedule_retirement(
                    conn, kid=row["kid"], retired_at=row["now"], lifetime=TOKEN_LIFETIME
                )
        if pending:
            # Nothing can sign: the next key starts now rather than leaving sign-ins broken.
            await queries.start_signing_now(conn, pending[-1]["kid"])
            return f"started {pending[-1]['kid']}"
        row = await _insert(
            conn,
            settings,
            alg=settings.section(IdentitySettings).access_token_alg,
            signing_from=None,
        )
        log.info("signing key %s created; it signs from now", row["kid"])
        return f"created {row['kid']}"
    signing = max(current, key=lambda r: r["signing_from"])
    days = settings.section(IdentitySettings).access_token_key_rotation_days
    due = days > 0 and signing["signing_from"] <= signing["now"] - dt.timedelta(days=days)
    if (
        not pending
        and rotate_when_due
        and (due or signing["alg"] != settings.section(IdentitySettings).access_token_alg)
    ):
        row = await _rotate_locked(conn, settings, rows)
        return f"rotated to {row['kid']}"
    return None


async def rotate(conn: Conn, settings: Settings) -> Row:
    """Publish a next key now; it signs after PUBLISH_LEAD, when the current key retires.
    Conflict when a rotation is already pending. Run in a transaction."""
    if settings.section(IdentitySettings).access_token_alg == HS256:
        raise Conflict("ACCESS_TOKEN_ALG=HS256 signs with SECRET_KEY: there is no key to rotate")
    await queries.lock_keys(conn)
    rows = await queries.all_keys(conn)
    pending = [r for r in rows if state_of(r) == "next"]
    if pending:
        raise Conflict(
            f"a rotation is pending: {pending[-1]['kid']} signs from"
            f" {pending[-1]['signing_from'].isoformat()}"
        )
    return await _rotate_locked(conn, settings, rows)


async def _rotate_locked(conn: Conn, settings: Settings, rows: list[Row]) -> Row:
    now = rows[0]["now"] if rows else await queries.db_now(conn)
    takes_over = now + PUBLISH_LEAD
    new = await _insert(
        conn,
        settings,
        alg=settings.section(IdentitySettings).access_token_alg,
        signing_from=takes_over,
    )
    for row in rows:
        if state_of(row) == "current" and (
            row["retired_at"] is None or row["retired_at"] > takes_over
        ):
            await queries.schedule_retirement(
                conn, kid=row["kid"], retired_at=takes_over, lifetime=TOKEN_LIFETIME
            )
    log.info("signing key %s published; it signs from %s", new["kid"], takes_over.isoformat())
    return new


async def retire(conn: Conn, settings: Settings, kid: str, *, now: bool = False) -> KeyView:
    """Stop publishing `kid` once no live token needs it: a next key (it never signed) goes
    at once; a retired one already goes at its not_after. The current key retires through
    `rotate`. With `now` (a compromised key) its tokens are refused at once and a pending
    next key takes over at once. Run in a transaction."""
    await queries.lock_keys(conn)
    row = await queries.key(conn, kid)
    if row is None:
        raise NotFound(f"no signing key {kid}")
    state = state_of(row)
    if state == "current":
        rows = await queries.all_keys(conn)
        pending = [r for r in rows if state_of(r) == "next" and _usable(r, settings)]
        if not now or not pending:
            raise Conflict(
                f"{kid} is the signing key: run `tenantd keys rotate`; it retires when the"
                " next key takes over"
                + ("" if not now else " (then `retire --now` ends it at once)")
            )
        await queries.start_signing_now(conn, pending[-1]["kid"])
        await queries.withdraw(conn, kid)
    elif state == "next":
        if row["signing_from"] is not None:
            await queries.cancel_retirement(conn, retired_at=row["signing_from"])
        await queries.withdraw(conn, kid)
    elif state == "retired" and now:
        await queries.withdraw(conn, kid)
    found = await queries.key(conn, kid)
    assert found is not None
    return view_of(found)


async def maintain(conn: Conn) -> dict[str, int]:
    """Retired keys lose their private part; long-expired rows go."""
    wiped = await queries.wipe_retired_private_keys(conn)
    deleted = await queries.delete_expired(conn, older_than=EXPIRED_ROWS_KEPT)
    return {"signing_keys_wiped": wiped, "signing_keys_deleted": deleted}
