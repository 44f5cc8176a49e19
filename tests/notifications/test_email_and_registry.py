"""Email channel rendering, RFC 8058 one-click unsubscribe, and registry start-up checks."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import jwt
import pytest
from pydantic import BaseModel

from tenantd.app.factory import create_app
from tenantd.notifications import (
    Dedup,
    EmailContent,
    EventDefinition,
    EventRegistry,
    InAppContent,
    RegistryError,
    send,
)
from tenantd.notifications.domain import Notifications
from tenantd.notifications.registry import load_registry
from tenantd.notifications.unsubscribe import make_token
from tests.factories import mail_text, read_mails
from tests.notifications.support import quiesce

HERE = Path(__file__).parent


def unsubscribe_link(message: Any) -> str:
    header = message["List-Unsubscribe"]
    assert header.startswith("<") and header.endswith(">")
    return str(header[1:-1])


async def test_email_carries_one_click_unsubscribe(
    services: Notifications, factory: Any, mail_dir: Path, make_client: Any
) -> None:
    user = await factory.user()
    await send(
        services,
        "comment.created",
        recipient_user_id=user.id,
        payload={"actorId": str(uuid.uuid4()), "commentId": "u1", "text": "hi"},
    )
    await quiesce(services)
    [message] = read_mails(mail_dir)
    link = unsubscribe_link(message)
    assert link.startswith("http://127.0.0.1:8080/api/v1/notifications/unsubscribe?token=")
    assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    # Templates get {{ unsubscribe_url }}: the hosted confirmation page, same token.
    token = link.split("token=", 1)[1]
    assert f"http://127.0.0.1:8080/unsubscribe?token={token}" in mail_text(message)
    path = link.removeprefix("http://127.0.0.1:8080")
    # A mail client's one-click POST: no session, no Origin, form body.
    anonymous = await make_client(origin=None)
    page = await anonymous.get(path)
    assert page.status == 200 and "comment.created" in await page.text()
    assert await services.db.fetch_val("SELECT count(*) FROM notification_preferences") == 0
    response = await anonymous.post(
        path,
        data="List-Unsubscribe=One-Click",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    body = await response.json()
    assert response.status == 200, body
    assert body["data"] == {"eventType": "comment.created", "channel": "email", "enabled": False}
    row = await services.db.fetch_one("SELECT * FROM notification_preferences")
    assert row is not None
    assert (row["user_id"], row["event_type"], row["channel"], row["enabled"]) == (
        user.id,
        "comment.created",
        "email",
        False,
    )
    # The next notification of that type is not emailed; other types still are.
    await send(
        services,
        "comment.created",
        recipient_user_id=user.id,
        payload={"actorId": str(uuid.uuid4()), "commentId": "u2", "text": "again"},
    )
    await send(
        services, "report.ready", recipient_user_id=user.id, payload={"reportName": "Q", "rows": 1}
    )
    await quiesce(services)
    subjects = [m["Subject"] for m in read_mails(mail_dir)]
    assert subjects.count("New comment") == 1 and subjects.count("Report Q") == 1


async def test_forged_unsubscribe_tokens_are_refused(
    services: Notifications, factory: Any, make_client: Any
) -> None:
    user = await factory.user()
    client = await make_client(origin=None)
    # Signed with the wrong key, and an access token (right secret, wrong purpose).
    forged = make_token(
        "another-secret-key-0123456789-abcdefghijk", user_id=user.id, event_type="comment.created"
    )
    access = (await factory.tokens(user)).access_token
    unsigned = jwt.encode(
        {"sub": str(user.id), "evt": "comment.created", "ch": "email", "purpose": "unsubscribe"},
        "x" * 32,
        algorithm="HS256",
    )
    for token in [forged, access, unsigned, "garbage"]:
        response = await client.post(f"/api/v1/notifications/unsubscribe?token={token}")
        assert response.status == 422
        assert "token" in (await response.json())["error"]["details"]["fields"]
    response = await client.post("/api/v1/notifications/unsubscribe")
    assert response.status == 422
    assert await services.db.fetch_val("SELECT count(*) FROM notification_preferences") == 0


async def test_html_template_gets_a_text_part(
    services: Notifications, factory: Any, mail_dir: Path
) -> None:
    user = await factory.user()
    await send(
        services,
        "report.ready",
        recipient_user_id=user.id,
        payload={"reportName": "<Q3>", "rows": 12},
    )
    await quiesce(services)
    [message] = read_mails(mail_dir)
    assert message["Subject"] == "Report <Q3>"
    text = mail_text(message)
    assert "Report <Q3>" in text and "It has 12 rows & is ready." in text
    assert "<b>" not in text
    html = next(p for p in message.walk() if p.get_content_type() == "text/html")
    markup = html.get_payload(decode=True).decode()
    assert "Report &lt;Q3&gt;" in markup  # autoescaped


class Payload(BaseModel):
    name: str


def definition(**overrides: Any) -> EventDefinition:
    values: dict[str, Any] = {
        "type": "thing.happened",
        "schema": Payload,
        "in_app": lambda r, p: InAppContent(title=p.name),
        "email": lambda r, p: EmailContent(subject="s", template_path="templates/comment.txt"),
    }
    values.update(overrides)
    return EventDefinition(**values)


def test_registry_checks_name_the_event() -> None:
    registry = EventRegistry()
    registry.register(definition(), base_dir=HERE)
    with pytest.raises(RegistryError, match=r"event thing\.happened: duplicate"):
        registry.register(definition(), base_dir=HERE)
    with pytest.raises(RegistryError, match=r"event other\.one: unknown channel 'fax'"):
        registry.register(
            definition(type="other.one", default_channels=("in_app", "fax")), base_dir=HERE
        )
    with pytest.raises(RegistryError, match=r"event missing\.tpl: email template .* not found"):
        registry.register(
            definition(
                type="missing.tpl",
                email=lambda r, p: EmailContent(subject="s", template_path="templates/nope.txt"),
            ),
            base_dir=HERE,
        )
    with pytest.raises(RegistryError, match=r"event no\.email: email channel without"):
        registry.register(definition(type="no.email", email=None), base_dir=HERE)
    with pytest.raises(RegistryError, match=r"event no\.inapp: in_app render"):
        registry.register(definition(type="no.inapp", in_app=None), base_dir=HERE)
    with pytest.raises(RegistryError, match=r"event bad\.dedup: dedup"):
        registry.register(
            definition(type="bad.dedup", dedup=Dedup(key=lambda r, p: "k", window_seconds=0)),
            base_dir=HERE,
        )
    # Templates are relative to the module's folder: the same path elsewhere is missing.
    with pytest.raises(RegistryError, match="not found"):
        registry.register(definition(type="elsewhere.one"), base_dir=HERE.parent)
    # An event without the email channel needs no email function.
    registry.register(
        definition(type="quiet.one", default_channels=("in_app",), email=None), base_dir=HERE
    )
    assert [e.type for e in registry.events()] == ["thing.happened", "quiet.one"]


def test_load_registry_imports_modules() -> None:
    registry = load_registry(["tests.notifications.events_fixture"])
    assert [e.type for e in registry.events()] == ["comment.created", "report.ready", "ping.simple"]
    assert registry.get("comment.created").base_dir == HERE
    with pytest.raises(RegistryError, match=r"broken\.template"):
        load_registry(["tests.notifications.bad_events_fixture"])
    with pytest.raises(RegistryError, match="duplicate"):
        load_registry(["tests.notifications.events_fixture"] * 2)
    with pytest.raises(RegistryError, match="cannot import"):
        load_registry(["tests.notifications.no_such_module"])
    with pytest.raises(RegistryError, match="has no list EVENTS"):
        load_registry(["tests.notifications.support"])


async def test_app_start_up_fails_on_a_bad_event_module(
    settings: Any, migrated: str, aiohttp_server: Any, db: Any
) -> None:
    bad = settings.replaced(
        settings.notifications.model_copy(
            update={"event_modules": ("tests.notifications.bad_events_fixture",)}
        )
    )
    with pytest.raises(RegistryError, match=r"event broken\.template"):
        await aiohttp_server(create_app(bad, migrated))


@pytest.mark.parametrize(
    ("ui", "body_path"),
    [("true", "/unsubscribe"), ("false", "/api/v1/notifications/unsubscribe")],
)
def test_the_mailed_link_opens_the_page_unless_pages_are_off(
    services: Notifications, ui: str, body_path: str
) -> None:
    """The body's link follows TENANTD_UI; the one-click header always names the API route."""
    from types import SimpleNamespace

    from tenantd.notifications.channels.email import build_message
    from tenantd.settings import parse_flag

    settings = services.settings.switched("TENANTD_UI", parse_flag(ui))
    bundle: Any = SimpleNamespace(settings=settings, registry=services.registry)
    row = {
        "id": uuid.uuid4(),
        "user_id": uuid.uuid4(),
        "event_type": "comment.created",
        "payload": {"actorId": "a", "commentId": "c", "text": "hi"},
        "locale": None,
        "title": "New comment",
        "body": "hi",
        "cta_url": "/c/c",
        "cta_label": "Open",
        "email": "someone@example.com",
    }
    message = build_message(bundle, row)
    header = message.headers["List-Unsubscribe"]
    assert header.startswith("<http://127.0.0.1:8080/api/v1/notifications/unsubscribe?token=")
    token = header.split("token=", 1)[1].rstrip(">")
    assert f"http://127.0.0.1:8080{body_path}?token={token}" in message.text
