"""A user an operator disabled (issue 28) is refused at the end of a provider's sign-in."""

from __future__ import annotations

from typing import Any

from tenantd.db import Database
from tests.apikeys.helpers import bearer, new_key
from tests.auth.oauth.support import Browser, login_error
from tests.helpers import data


async def test_a_disabled_user_cannot_sign_in_with_a_provider(
    browser: Browser, new_browser: Any, db: Database
) -> None:
    assert (await browser.sign_in()).headers["Location"] == "/"
    user_id = await db.fetch_val("SELECT user_id FROM user_identities")
    key = await new_key(db, "users:manage")
    path = f"/api/v1/admin/users/{user_id}/disable"
    await data(await browser.client.post(path, headers=bearer(key.token)))
    other = await new_browser()
    response = await other.sign_in()
    assert login_error(response) == {"error": "user_disabled"}
    assert other.cookie("auth_token") is None
