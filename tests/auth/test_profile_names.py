"""PATCH /api/v1/users/me {firstName?, lastName?} (issue 28, part 5): names change, a name not
given is kept, single-line text only (control characters and line separators refused), and
the change is announced as `user.updated` with the previous values."""

from __future__ import annotations

from typing import Any

import pytest

from tests.factories import Factory
from tests.helpers import data, error
from tests.mfa.helpers import signed_in


async def test_names_change_and_a_name_not_given_is_kept(
    make_client: Any, factory: Factory, db: Any, settings: Any
) -> None:
    user = await factory.user(first_name="Ada", last_name="Byron")
    client = await signed_in(make_client, db, settings, user)
    changed = await data(await client.patch("/api/v1/users/me", json={"lastName": " Lovelace "}))
    assert changed == {"firstName": "Ada", "lastName": "Lovelace"}
    me = await (await client.get("/api/v1/users/me")).json()
    assert (me["user"]["firstName"], me["user"]["lastName"]) == ("Ada", "Lovelace")
    event = await db.fetch_one(
        "SELECT data, previous FROM outbox_events WHERE type = 'user.updated'"
        " ORDER BY id DESC LIMIT 1",
        {},
    )
    assert event is not None
    assert event["previous"] == {"lastName": "Byron"}
    assert event["data"]["lastName"] == "Lovelace"
    # An empty string clears a name.
    cleared = await data(await client.patch("/api/v1/users/me", json={"firstName": ""}))
    assert cleared == {"firstName": "", "lastName": "Lovelace"}


HOSTILE = ["Ann\u2028Bee", "Ann\u2029", "Ann\x85", "Ann\nBcc: x@evil.example", "A\x00", "A\x7f"]


@pytest.mark.parametrize("name", HOSTILE, ids=[repr(h) for h in HOSTILE])
async def test_control_and_line_separator_characters_are_refused(
    make_client: Any, factory: Factory, db: Any, settings: Any, name: str
) -> None:
    user = await factory.user(first_name="Ann")
    client = await signed_in(make_client, db, settings, user)
    refused = await error(await client.patch("/api/v1/users/me", json={"firstName": name}), 422)
    assert "firstName" in refused["details"]["fields"]
    stored = await db.fetch_val("SELECT first_name FROM users WHERE id = %(u)s", {"u": user.id})
    assert stored == "Ann"


async def test_an_empty_body_a_long_name_and_an_anonymous_caller_are_refused(
    make_client: Any, factory: Factory, db: Any, settings: Any
) -> None:
    user = await factory.user()
    client = await signed_in(make_client, db, settings, user)
    await error(await client.patch("/api/v1/users/me", json={}), 422)
    await error(await client.patch("/api/v1/users/me", json={"lastName": "x" * 101}), 422)
    await error(await client.patch("/api/v1/users/me", json={"nickname": "x"}), 422)
    anonymous = await make_client()
    await error(await anonymous.patch("/api/v1/users/me", json={"firstName": "X"}), 401)
