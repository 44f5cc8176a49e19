"""The recipient's `users.locale` reaches event render functions that take a `locale` keyword
(in-app content, digests, the email function) and picks the `<name>.<locale>.<ext>` variant of
an event's email template when it ships one; English (the plain template) otherwise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tenantd.notifications import send
from tenantd.notifications.domain import Notifications
from tests.factories import mail_text, read_mails
from tests.helpers import eventually
from tests.notifications.support import EVENT_MODULE, quiesce


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env["TENANTD_EVENT_MODULES"] = f"{EVENT_MODULE},tests.notifications.locale_events_fixture"
    return env


async def set_locale(db: Any, user: Any, locale: str | None) -> None:
    await db.execute(
        "UPDATE users SET locale = %(l)s WHERE id = %(u)s", {"l": locale, "u": user.id}
    )


async def mail_to(mail_dir: Path, address: str) -> Any:
    def found() -> Any:
        mails = [m for m in read_mails(mail_dir) if address in str(m["To"])]
        return mails[0] if mails else None

    return await eventually(found)


@pytest.mark.parametrize("queues_enabled", [False, True], ids=["inline", "queued"])
async def test_french_recipient_gets_french_in_app_and_email(
    services: Notifications, factory: Any, db: Any, mail_dir: Path, queues_enabled: bool
) -> None:
    french = await factory.user(password=None)
    english = await factory.user(password=None)
    await set_locale(db, french, "fr")
    await set_locale(db, english, None)
    sent_fr = await send(
        services, "greeting.localized", recipient_user_id=french.id, payload={"name": "Ana"}
    )
    sent_en = await send(
        services, "greeting.localized", recipient_user_id=english.id, payload={"name": "Bo"}
    )
    await quiesce(services)

    async def title(notification_id: Any) -> Any:
        return await db.fetch_val(
            "SELECT title FROM notifications WHERE id = %(i)s", {"i": notification_id}
        )

    assert await eventually(lambda: title(sent_fr.notification_id)) == "Bonjour Ana"
    assert await eventually(lambda: title(sent_en.notification_id)) == "Hello Bo"
    mail_fr = await mail_to(mail_dir, french.email)
    assert mail_fr["Subject"] == "Salut"
    assert mail_text(mail_fr).startswith("Bonjour Ana (fr)")
    mail_en = await mail_to(mail_dir, english.email)
    assert mail_en["Subject"] == "Hi"
    assert mail_text(mail_en).startswith("Hello Bo (none)")


async def test_a_locale_without_a_template_variant_falls_back_to_the_plain_one(
    services: Notifications, factory: Any, db: Any, mail_dir: Path
) -> None:
    user = await factory.user(password=None)
    await set_locale(db, user, "de")
    await send(services, "greeting.localized", recipient_user_id=user.id, payload={"name": "Cy"})
    await quiesce(services)
    mail = await mail_to(mail_dir, user.email)
    assert mail_text(mail).startswith("Hello Cy (de)")


@pytest.mark.parametrize("queues_enabled", [True])
async def test_digests_render_in_the_recipient_locale(
    services: Notifications, factory: Any, db: Any
) -> None:
    user = await factory.user(password=None)
    await set_locale(db, user, "fr")
    for name in ("Ana", "Bo"):
        # One at a time: two queued dispatches may join the digest in either order.
        await send(services, "greeting.digest", recipient_user_id=user.id, payload={"name": name})
        await eventually(
            lambda: db.fetch_val(
                "SELECT count(*) = 0 FROM jobs WHERE kind = 'notifications.dispatch'"
                " AND status IN ('queued', 'running')"
            )
        )
    # The window is an hour: the flush job is due now instead.
    await db.execute("UPDATE jobs SET run_at = now() WHERE kind = 'notifications.digest'")
    await quiesce(services)
    row = await eventually(
        lambda: db.fetch_one(
            "SELECT title, body FROM notifications WHERE user_id = %(u)s", {"u": user.id}
        )
    )
    assert row["title"] == "2 new: Bonjour Bo"
    assert row["body"].splitlines() == ["Bonjour Ana", "Bonjour Bo"]
