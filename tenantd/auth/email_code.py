"""Sign-in by email (MAGIC_LINK_ENABLED): a 6-digit code and a magic link in one mail.

- The request only queues `{purpose: email_code, email}`; the `auth.email` job mints the code
  and the link, stores their keyed hashes (one live pair per address: a new request ends the
  old one) and sends the mail. So the answer, and its timing, are the same for every address.
- A code or a link is single use and lives CODE_TTL. Five wrong codes end the pair: the right
  code and the link are refused from then on (a new request starts over). Requests and
  verifications are also limited per address and per client by the rate limiter.
- Using a code or the link proves the mailbox, as a verification link does: an address with
  no user becomes a verified user with a personal account and no password; a sign-up not yet
  verified is verified (what that unproven sign-up chose, its pending password, is dropped, as
  after an OpenID Connect sign-in). A user with a second factor gets an MFA ticket
  (`mfaRequired`), exactly as after a password.
"""

from __future__ import annotations

import datetime as dt
import hmac
import secrets
from typing import TYPE_CHECKING
from urllib.parse import quote

from tenantd.accounts import mail as account_mail
from tenantd.accounts.errors import DomainClaimed
from tenantd.accounts.provisioning import DomainConflict, provision_personal_account
from tenantd.addresses import InvalidEmail, canonical_email, normalize_email
from tenantd.auth import captcha, mail
from tenantd.auth import queries as auth_queries
from tenantd.auth.domain import Auth
from tenantd.auth.schemas import EmailCodeVerifyBody
from tenantd.auth.service import MfaPending, SignedIn, ticket_or_session
from tenantd.db import Conn, Row
from tenantd.errors import NotFound, ValidationFailed
from tenantd.identity import queries
from tenantd.identity.events import user_changed
from tenantd.identity.queries import claim_unverified_user
from tenantd.identity.sessions import ClientMeta
from tenantd.identity.settings import SignInSettings
from tenantd.identity.signin import AUTH_EMAIL
from tenantd.identity.tokens import new_opaque_token, token_hash
from tenantd.mfa import service as mfa
from tenantd.outbox import Actor
from tenantd.settings import Settings
from tenantd.suppression import service as suppression

if TYPE_CHECKING:
    from tenantd.bundle import Services

EMAIL_CODE = "email_code"  # the auth.email job's purpose; the session method of a code
MAGIC_LINK = "magic_link"  # the session method of the link
AMR_EMAIL = "email"  # the mailbox was the proof (as a verification link)
CODE_TTL = dt.timedelta(minutes=10)
MAX_WRONG_CODES = 5
LINK_PATH = "/email-code"
REQUEST_MESSAGE = "If this address can sign in, a code and a link are on their way."


def _require_enabled(settings: Settings) -> None:
    if not settings.section(SignInSettings).magic_link_enabled:
        raise NotFound()


def _code_hash(settings: Settings, email: str, code: str) -> bytes:
    # The address is in the hash: six digits are few, the key and the address make it unique.
    return token_hash(settings.secret_key, f"email-code:{email}:{code}")


def _link_hash(settings: Settings, token: str) -> bytes:
    return token_hash(settings.secret_key, f"email-link:{token}")


def bad_code() -> ValidationFailed:
    # Unknown address, wrong, expired, used or ended code: all look the same.
    return ValidationFailed({"code": "This code is invalid, expired or already used"})


def bad_link() -> ValidationFailed:
    return ValidationFailed({"token": "This link is invalid, expired or already used"})


def _live(row: Row | None) -> bool:
    return (
        row is not None
        and row["attempts"] < MAX_WRONG_CODES
        and row["expires_at"] > dt.datetime.now(dt.UTC)
    )


async def request_code(
    services: Services, *, email: str, client: ClientMeta, captcha_token: str | None = None
) -> str:
    """Queue a code and a link for the address (bot check first when configured); the same
    answer, and the same work, whatever the address."""
    _require_enabled(services.settings)
    await captcha.require(services, token=captcha_token, ip=client.ip)
    try:
        address = canonical_email(email)
    except InvalidEmail as error:
        raise ValidationFailed({"email": error.reason}) from None
    await services.jobs.enqueue(services.db, AUTH_EMAIL, {"purpose": EMAIL_CODE, "email": address})
    return REQUEST_MESSAGE


async def mail_code(services: Services, email: str) -> None:
    """The job's half: a new code and link for the address (the previous pair ends), mailed."""
    settings = services.settings
    address = normalize_email(email)
    code = f"{secrets.randbelow(1_000_000):06d}"
    token = new_opaque_token()
    async with services.db.transaction() as conn:
        await auth_queries.replace_email_code(
            conn,
            email=address,
            code_hash=_code_hash(settings, address, code),
            link_hash=_link_hash(settings, token),
            expires_at=dt.datetime.now(dt.UTC) + CODE_TTL,
        )
        user = await queries.user_by_email(conn, address)
    link = f"{settings.public_base_url.rstrip('/')}{LINK_PATH}?token={quote(token)}"
    message = mail.email_code(
        address,
        code=code,
        link=link,
        ttl_minutes=int(CODE_TTL.total_seconds() // 60),
        settings=settings,
        first_name=user["first_name"] if user else "",
    )
    await mail.deliver_from_job(services, message)


async def verify(
    services: Auth, body: EmailCodeVerifyBody, *, client: ClientMeta
) -> SignedIn | MfaPending:
    """Sign in with the address and its code, or with the link's token (one or the other)."""
    email, code, token = body.email, body.code, body.token
    if token is not None and email is None and code is None:
        return await verify_link(services, token=token, client=client)
    if email is not None and code is not None and token is None:
        return await verify_code(services, email=email, code=code, client=client)
    _require_enabled(services.settings)
    raise ValidationFailed({"body": "give email and code, or token"})


async def verify_code(
    services: Auth, *, email: str, code: str, client: ClientMeta
) -> SignedIn | MfaPending:
    """Sign in with the address's code; a wrong one counts against it (five end it)."""
    settings = services.settings
    _require_enabled(settings)
    try:
        address = canonical_email(email)
    except InvalidEmail:
        raise bad_code() from None
    wrong = False
    conflict: DomainConflict | None = None
    result: SignedIn | MfaPending | None = None
    async with services.db.transaction() as conn:
        row = await auth_queries.lock_email_code(conn, address)
        if row is None or not _live(row):
            raise bad_code()
        if hmac.compare_digest(bytes(row["code_hash"]), _code_hash(settings, address, code)):
            await auth_queries.delete_email_code(conn, address)
            result, conflict = await _sign_in(services, conn, address, client, EMAIL_CODE)
        else:
            await auth_queries.count_wrong_code(conn, address)  # committed with the refusal
            wrong = True
    return _answer(wrong, conflict, result)


async def verify_link(services: Auth, *, token: str, client: ClientMeta) -> SignedIn | MfaPending:
    """Sign in with the mail's link (single use; refused once five wrong codes ended it)."""
    settings = services.settings
    _require_enabled(settings)
    conflict: DomainConflict | None = None
    result: SignedIn | MfaPending | None = None
    async with services.db.transaction() as conn:
        row = await auth_queries.lock_email_link(conn, _link_hash(settings, token))
        if row is None or not _live(row):
            raise bad_link()
        await auth_queries.delete_email_code(conn, row["email"])
        result, conflict = await _sign_in(services, conn, row["email"], client, MAGIC_LINK)
    return _answer(False, conflict, result)


def _answer(
    wrong: bool, conflict: DomainConflict | None, result: SignedIn | MfaPending | None
) -> SignedIn | MfaPending:
    """After commit: the refusal of a wrong code, DOMAIN_CLAIMED, or the sign-in."""
    if wrong:
        raise bad_code()
    if conflict is not None:
        raise DomainClaimed(
            details={"accountId": str(conflict.account_id), "domain": conflict.domain}
        )
    assert result is not None
    return result


async def _sign_in(
    services: Auth, conn: Conn, email: str, client: ClientMeta, method: str
) -> tuple[SignedIn | MfaPending | None, DomainConflict | None]:
    """The mailbox is proven: the user (created or verified if need be), then a session, an
    MFA ticket, or the domain conflict (its join request and mails committed by the caller)."""
    settings = services.settings
    user_id = await queries.insert_user(conn, email=email, first_name="", last_name="")
    if user_id is not None:
        await user_changed(conn, "user.created", user_id)
    user = await queries.lock_user_by_email(conn, email)
    assert user is not None  # inserted above, or the row the insert conflicted on
    user_id = user["id"]
    if await claim_unverified_user(conn, user_id):
        await user_changed(conn, "user.email_verified", user_id, previous={"emailVerified": False})
        await suppression.remove(conn, email, actor=Actor.user(user_id))
    provisioned = await provision_personal_account(conn, settings, user_id=user_id)
    if provisioned.conflict is not None:
        found = provisioned.conflict
        await account_mail.submit_join_request(
            services, conn, join_request_id=found.join_request_id
        )
        return None, found
    started = await ticket_or_session(
        services,
        conn,
        user_id=user_id,
        account_id=provisioned.account_id,
        client=client,
        method=method,
        amr=AMR_EMAIL,
    )
    if isinstance(started, mfa.Ticket):
        return MfaPending(started), None
    row = await queries.user_by_id(conn, user_id)
    return SignedIn(started.tokens, row, device=started.device), None
