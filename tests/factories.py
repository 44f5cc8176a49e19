"""Small factories with defaults: users (verified, with an account), sessions, memberships.

Rows are written by the functions of the packages that own them (identity's user queries,
accounts' provisioning, plan and membership queries), not by copies of their SQL; they skip
the services' side effects (audit entries, mails) that the tests would otherwise see."""

from __future__ import annotations

import asyncio
import email
import itertools
import os
import sys
import uuid
from dataclasses import dataclass
from email.message import Message
from pathlib import Path

from tenantd.accounts import queries as accounts_queries
from tenantd.accounts.provisioning import create_account
from tenantd.db import Conn, Database
from tenantd.identity import queries as identity_queries
from tenantd.identity.keys.feed import prepare
from tenantd.identity.keys.keyring import Keyring
from tenantd.identity.passwords import hash_password
from tenantd.identity.sessions import IssuedTokens, issue_session
from tenantd.identity.settings import IdentitySettings
from tenantd.pubsub.hub import PubSubHub
from tenantd.settings import Settings

_counter = itertools.count(1)
DEFAULT_PASSWORD = "correct horse battery staple"


@dataclass
class UserRecord:
    id: uuid.UUID
    email: str
    password: str
    account_id: uuid.UUID | None


class Factory:
    def __init__(self, db: Database, settings: Settings):
        self.db = db
        self.settings = settings
        # Signs with the keys of signing_keys, as every instance does (the first use creates
        # the signing key if no app has yet).
        self.keyring = Keyring(
            algorithm=settings.section(IdentitySettings).access_token_alg,
            secret_key=settings.secret_key,
            audience=settings.section(IdentitySettings).access_token_audience,
        )

    async def user(
        self,
        *,
        email: str | None = None,
        password: str | None = DEFAULT_PASSWORD,
        verified: bool = True,
        account: bool = True,
        first_name: str = "",
        last_name: str = "",
        plan: str | None = None,
    ) -> UserRecord:
        email = email or f"user{next(_counter)}-{uuid.uuid4().hex[:6]}@example.com"
        async with self.db.transaction() as conn:
            user_id = await identity_queries.insert_user(
                conn, email=email, first_name=first_name, last_name=last_name
            )
            assert user_id is not None, f"{email} is taken"
            if verified:
                await identity_queries.mark_email_verified(conn, user_id)
            if password is not None:
                await identity_queries.set_password(
                    conn, user_id=user_id, password_hash=await hash_password(password)
                )
            account_id = None
            if account and verified:
                account_id = await create_account(
                    conn, self.settings, owner_id=user_id, name=f"{email} account"
                )
                if plan:
                    await self.set_plan(account_id, plan, conn=conn)
        return UserRecord(id=user_id, email=email, password=password or "", account_id=account_id)

    async def set_plan(
        self,
        account_id: uuid.UUID,
        plan: str,
        *,
        seats: int | None = None,
        conn: Conn | None = None,
    ) -> None:
        """The plan row as `tenantd accounts set-plan` writes it, without its audit entry."""
        if conn is None:
            async with self.db.connection() as own:
                await self.set_plan(account_id, plan, seats=seats, conn=own)
            return
        await accounts_queries.set_plan(conn, account_id=account_id, plan_code=plan, seats=seats)

    async def member(self, account_id: uuid.UUID, user_id: uuid.UUID, role: str = "member") -> None:
        """A membership as an accepted invitation writes it, without its audit entry."""
        async with self.db.connection() as conn:
            await accounts_queries.insert_membership(
                conn, account_id=account_id, user_id=user_id, role=role
            )

    async def tokens(self, user: UserRecord, account_id: uuid.UUID | None = None) -> IssuedTokens:
        await prepare(self.db, self.settings, self.keyring)
        async with self.db.connection() as conn:
            return await issue_session(
                conn,
                self.settings,
                keyring=self.keyring,
                user_id=user.id,
                account_id=account_id or user.account_id,
            )

    async def cookies(
        self, user: UserRecord, account_id: uuid.UUID | None = None
    ) -> dict[str, str]:
        issued = await self.tokens(user, account_id)
        return {"auth_token": issued.access_token, "refresh_token": issued.refresh_token}


def read_mails(directory: Path) -> list[Message]:
    if not directory.exists():
        return []
    return [email.message_from_bytes(p.read_bytes()) for p in sorted(directory.glob("*.eml"))]


def mail_text(message: Message) -> str:
    for part in message.walk():
        if part.get_content_type() == "text/plain":
            payload = part.get_payload(decode=True)
            assert isinstance(payload, bytes)
            return payload.decode()
    raise AssertionError("no text part")


async def wait_until_heard(
    db: Database, hub: PubSubHub, channel: str, *, within: float = 30.0
) -> None:
    """Wait until `hub` has delivered every announcement on `channel` committed before this
    call.

    Relays publish announcements in the order they were written, so once a marker announced
    now arrives, everything the test wrote before (the factory's rows announce themselves
    too) has been heard. Cache tests use it so a late invalidation cannot land between their
    requests. The marker is published here (any process may run the publisher).
    """
    marker = f"test-marker:{uuid.uuid4()}"
    heard = asyncio.Event()

    def on_message(_channel: str, payload: str) -> None:
        if payload == marker:
            heard.set()

    subscription = await hub.subscribe(channel, on_message)
    try:
        await db.execute("SELECT tenantd_announce(%(c)s, %(m)s)", {"c": channel, "m": marker})
        await db.execute("SELECT tenantd_publish_announcements()")
        async with asyncio.timeout(within):
            await heard.wait()
    finally:
        await hub.unsubscribe(subscription)


REPO_ROOT = Path(__file__).resolve().parents[1]
CLI_WITHIN = 120.0  # seconds: generous, the machine may be busy


async def run_tenantd(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    """Run the `tenantd` CLI as a separate process (this checkout's package): exit, out, err."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tenantd",
        *args,
        cwd=str(REPO_ROOT),
        env={**os.environ, **env, "PYTHONPATH": str(REPO_ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), CLI_WITHIN)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()
