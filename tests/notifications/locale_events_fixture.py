"""Event types of the locale tests: render functions that take the recipient's locale (and a
digest of one), with an English template and its French variant beside it."""

from __future__ import annotations

from pydantic import BaseModel

from tenantd.notifications import Digest, EmailContent, EventDefinition, InAppContent

TITLES = {"fr": "Bonjour {name}", None: "Hello {name}"}


class Greeting(BaseModel):
    name: str


def title(p: Greeting, locale: str | None) -> str:
    return TITLES.get(locale, TITLES[None]).format(name=p.name)


def greeting_in_app(recipient: str, p: Greeting, *, locale: str | None = None) -> InAppContent:
    return InAppContent(title=title(p, locale))


def greeting_email(recipient: str, p: Greeting, *, locale: str | None = None) -> EmailContent:
    subject = "Salut" if locale == "fr" else "Hi"
    return EmailContent(
        subject=subject, template_path="templates/hello.txt", variables={"name": p.name}
    )


EVENTS = [
    EventDefinition(
        type="greeting.localized",
        schema=Greeting,
        default_channels=("in_app", "email"),
        in_app=greeting_in_app,
        email=greeting_email,
    ),
    EventDefinition(
        type="greeting.digest",
        schema=Greeting,
        default_channels=("in_app",),
        digest=Digest(key=lambda recipient, p: "all", window_seconds=3600, max_items=10),
        in_app=lambda recipient, p, locale=None: InAppContent(title=title(p, locale)),
    ),
]
