"""Issue 25, items 3 and 18: "This wasn't me" survives a second change (A->B->C: A's link
brings A back, B's link dies with it) and says what it did; a request for a taken address does
the same work as one for a free address, and mails after the answer."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tenantd.db import core
from tenantd.identity.queries import TOKEN_STATE
from tests.auth.helpers import mail_sent
from tests.auth.test_email_change import link_token, mails_to, signed_in, user_email
from tests.factories import Factory
from tests.helpers import data, error
from tests.ui.test_mfa_pages import post_form

CANCEL = "/api/v1/auth/email-change/cancel"
LOCK_USER = "FROM users WHERE id = %(id)s FOR UPDATE"


async def move(client: Any, mail_dir: Path, new: str) -> tuple[str, str]:
    """Change the signed-in user's address to `new` and confirm it: the cancel token mailed
    to the address it left, and that address."""
    before = (await (await client.get("/api/v1/users/me")).json())["user"]["email"]
    answer = await client.post("/api/v1/users/me/email", json={"newEmail": new})
    assert answer.status == 202, await answer.text()
    await mail_sent(client)
    confirm = link_token(mails_to(mail_dir, new)[-1], "/confirm-email")
    cancel = link_token(mails_to(mail_dir, before)[-1], "/cancel-email-change")
    await data(await client.post("/api/v1/users/me/email/confirm", json={"token": confirm}))
    return cancel, before


async def test_the_first_link_brings_the_original_address_back_after_a_second_change(
    make_client: Any, factory: Factory, db: Any, mail_dir: Path
) -> None:
    user = await factory.user()
    attacker = await signed_in(make_client, factory, user)
    victims_link, _ = await move(attacker, mail_dir, "b@attacker.example")
    attackers_link, _ = await move(attacker, mail_dir, "c@attacker.example")
    assert await user_email(db, user) == "c@attacker.example"

    victim = await make_client()
    answer = await data(await victim.post(CANCEL, json={"token": victims_link}))
    assert answer["restored"] is True and answer["kept"] is False
    assert "yours again" in answer["message"]
    assert await user_email(db, user) == user.email
    await error(await attacker.get("/api/v1/accounts"), 401)
    # The intermediate address's link ended with it: it cannot take the account back to B.
    await error(await victim.post(CANCEL, json={"token": attackers_link}), 422)
    assert await user_email(db, user) == user.email
    login = await victim.post(
        "/api/v1/auth/login", json={"email": user.email, "password": user.password}
    )
    assert login.status == 200


async def test_the_intermediate_link_used_first_does_not_beat_the_original(
    make_client: Any, factory: Factory, db: Any, mail_dir: Path
) -> None:
    user = await factory.user()
    attacker = await signed_in(make_client, factory, user)
    victims_link, _ = await move(attacker, mail_dir, "b2@attacker.example")
    attackers_link, _ = await move(attacker, mail_dir, "c2@attacker.example")
    anyone = await make_client()
    back_to_b = await data(await anyone.post(CANCEL, json={"token": attackers_link}))
    assert back_to_b["restored"] is True
    assert await user_email(db, user) == "b2@attacker.example"
    answer = await data(await anyone.post(CANCEL, json={"token": victims_link}))
    assert answer["restored"] is True
    assert await user_email(db, user) == user.email


async def test_a_pending_second_change_ends_with_the_first_link(
    make_client: Any, factory: Factory, db: Any, mail_dir: Path
) -> None:
    user = await factory.user()
    attacker = await signed_in(make_client, factory, user)
    victims_link, _ = await move(attacker, mail_dir, "b3@attacker.example")
    await attacker.post("/api/v1/users/me/email", json={"newEmail": "c3@attacker.example"})
    await mail_sent(attacker)
    confirm = link_token(mails_to(mail_dir, "c3@attacker.example")[-1], "/confirm-email")
    victim = await make_client()
    await data(await victim.post(CANCEL, json={"token": victims_link}))
    assert await user_email(db, user) == user.email
    again = await signed_in(make_client, factory, user)
    await error(await again.post("/api/v1/users/me/email/confirm", json={"token": confirm}), 422)
    assert await user_email(db, user) == user.email


async def test_the_answer_says_when_the_address_could_not_come_back(
    make_client: Any, factory: Factory, db: Any, mail_dir: Path
) -> None:
    user = await factory.user()
    attacker = await signed_in(make_client, factory, user)
    victims_link, original = await move(attacker, mail_dir, "b4@attacker.example")
    await factory.user(email=original, password=None)  # someone signed up with it meanwhile
    answer = await data(await (await make_client()).post(CANCEL, json={"token": victims_link}))
    assert answer["restored"] is False and answer["kept"] is False
    assert "could not be changed back" in answer["message"]
    assert await user_email(db, user) == "b4@attacker.example"
    await error(await attacker.get("/api/v1/accounts"), 401)  # the sessions ended all the same


async def test_a_pending_change_cancelled_keeps_the_address_and_says_so(
    make_client: Any, factory: Factory, db: Any, mail_dir: Path
) -> None:
    user = await factory.user()
    client = await signed_in(make_client, factory, user)
    await client.post("/api/v1/users/me/email", json={"newEmail": "b5@attacker.example"})
    await mail_sent(client)
    cancel = link_token(mails_to(mail_dir, user.email)[-1], "/cancel-email-change")
    answer = await data(await (await make_client()).post(CANCEL, json={"token": cancel}))
    assert answer["restored"] is False and answer["kept"] is True
    assert await user_email(db, user) == user.email


async def test_the_hosted_cancel_page_restores_and_says_so(
    make_client: Any, factory: Factory, db: Any, mail_dir: Path
) -> None:
    user = await factory.user()
    attacker = await signed_in(make_client, factory, user)
    victims_link, _ = await move(attacker, mail_dir, "b6@attacker.example")
    await move(attacker, mail_dir, "c6@attacker.example")
    victim = await make_client()
    page = f"/cancel-email-change?token={victims_link}"
    answer = await post_form(victim, page, "/cancel-email-change", token=victims_link)
    assert answer.status == 200
    assert "this one again" in await answer.text()
    assert await user_email(db, user) == user.email


# -- item 18: a taken address costs the same work as a free one --------------------------------


async def statements_of_one_request(client: Any, monkeypatch: Any, new: str) -> list[str]:
    """The statements the request's own task runs (the mail job runs in another task)."""
    seen: list[tuple[int, str]] = []
    original = core.Conn._run

    async def recording(self: Any, stmt: Any, params: Any) -> Any:
        task = asyncio.current_task()
        seen.append((id(task), " ".join(str(getattr(stmt, "sql", stmt)).split())))
        return await original(self, stmt, params)

    await mail_sent(client)  # no earlier job runs meanwhile
    monkeypatch.setattr(core.Conn, "_run", recording)
    answer = await client.post("/api/v1/users/me/email", json={"newEmail": new})
    monkeypatch.setattr(core.Conn, "_run", original)
    assert answer.status == 202
    # The request's task is the first to lock the user (its mail job does so after commit).
    request_task = next(task for task, sql in seen if LOCK_USER in sql)
    # The guard's own check runs when its cache is not serving this token (an invalidation
    # heard after commit, through the relay, may land between two requests): not the action's.
    guard = " ".join(TOKEN_STATE.sql.split())
    return [sql for task, sql in seen if task == request_task and sql != guard]


async def test_a_taken_address_runs_the_same_statements_and_queues_the_same_job(
    make_client: Any, factory: Factory, db: Any, mail_dir: Path, monkeypatch: Any
) -> None:
    user = await factory.user(password=None)
    await factory.user(email="owner@taken.example", password=None)
    client = await signed_in(make_client, factory, user)
    await client.post("/api/v1/users/me/email", json={"newEmail": "warm@free.example"})
    await mail_sent(client)

    free = await statements_of_one_request(client, monkeypatch, "someone@free.example")
    taken = await statements_of_one_request(client, monkeypatch, "owner@taken.example")
    assert free == taken
    # Decided after the answer, by the job: the request never looks the address up.
    assert not any("email_changes" in sql or "lower(email)" in sql for sql in free)
    await mail_sent(client)
    assert len(mails_to(mail_dir, "someone@free.example")) == 1
    assert len(mails_to(mail_dir, "owner@taken.example")) == 1


async def test_a_cancel_racing_the_confirmation_of_a_later_change_restores_the_original(
    make_client: Any, factory: Factory, db: Any, mail_dir: Path
) -> None:
    """Cancel (A->B's link) and confirm (B->C) at once, several times: both lock the user
    first, so no deadlock (no 5xx), and whichever wins, the account ends at A."""
    for round_ in range(4):
        user = await factory.user(password=None)
        attacker = await signed_in(make_client, factory, user)
        victims_link, _ = await move(attacker, mail_dir, f"b{round_}@race.example")
        later = f"c{round_}@race.example"
        await attacker.post("/api/v1/users/me/email", json={"newEmail": later})
        await mail_sent(attacker)
        confirm = link_token(mails_to(mail_dir, later)[-1], "/confirm-email")
        victim = await make_client()
        cancelled, confirmed = await asyncio.gather(
            victim.post(CANCEL, json={"token": victims_link}),
            attacker.post("/api/v1/users/me/email/confirm", json={"token": confirm}),
        )
        assert cancelled.status == 200, await cancelled.text()
        assert confirmed.status in (200, 401, 422), await confirmed.text()
        assert (await cancelled.json())["data"]["restored"] is True
        assert await user_email(db, user) == user.email
