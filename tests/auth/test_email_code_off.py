"""MAGIC_LINK_ENABLED is off by default: the email-code routes answer 404 and no mail leaves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.auth.helpers import mail_sent, mails_to
from tests.helpers import error


async def test_email_code_routes_answer_404_by_default(
    client: Any, factory: Any, mail_dir: Path
) -> None:
    user = await factory.user()
    await error(await client.post("/api/v1/auth/email-code", json={"email": user.email}), 404)
    verify = {"email": user.email, "code": "123456"}
    await error(await client.post("/api/v1/auth/email-code/verify", json=verify), 404)
    await error(await client.post("/api/v1/auth/email-code/verify", json={"token": "x"}), 404)
    await mail_sent(client)
    assert mails_to(mail_dir, user.email) == []
