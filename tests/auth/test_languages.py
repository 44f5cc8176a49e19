"""Languages: users.locale from Accept-Language at sign-up; the transactional auth emails in
English and French (templates `name.<locale>.*`, else `name.*`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tenantd.email.templates import Brand, best_locale, render
from tests.factories import mail_text, read_mails
from tests.helpers import PASSWORD, eventually


@pytest.mark.parametrize(
    ("header", "locale"),
    [
        ("fr-CA,fr;q=0.9,en;q=0.8", "fr"),
        ("de-DE,de;q=0.9,fr;q=0.5,en;q=0.7", "en"),
        ("de, fr;q=0.3", "fr"),
        ("FR", "fr"),
        ("de", None),
        ("", None),
        (None, None),
        ("fr;q=0, en;q=0.1", "en"),
        ("fr;q=abc, en", "en"),
        ("*", None),
        ("x" * 2000, None),
    ],
)
def test_best_locale(header: str | None, locale: str | None) -> None:
    assert best_locale(header) == locale


def test_templates_fall_back_to_english() -> None:
    variables = {"link": "https://x/verify", "first_name": "Zoé", "ttl_hours": 48}

    def subject(locale: str | None) -> str:
        return render("verify_email", variables, brand=Brand(), locale=locale)[0]

    assert subject("fr") == "Confirmez votre adresse e-mail"
    assert subject("de") == "Verify your email address"
    assert subject("../x") == "Verify your email address"
    assert subject(None) == "Verify your email address"


async def register(client: Any, email: str, language: str | None) -> None:
    headers = {"Accept-Language": language} if language else {}
    response = await client.post(
        "/auth/register", json={"email": email, "password": PASSWORD}, headers=headers
    )
    assert response.status == 200


async def test_sign_up_language_decides_the_auth_emails(
    client: Any, db: Any, mail_dir: Path
) -> None:
    await register(client, "zoe@example.fr", "fr-FR,fr;q=0.9,en;q=0.5")
    await register(client, "bob@example.com", None)
    locales = {
        r["email"]: r["locale"] for r in await db.fetch_all("SELECT email, locale FROM users")
    }
    assert locales == {"zoe@example.fr": "fr", "bob@example.com": None}
    mails = {m["To"]: m for m in read_mails(mail_dir)}
    assert "Confirmez votre adresse" in mail_text(mails["zoe@example.fr"])
    assert "Confirm your email address" in mail_text(mails["bob@example.com"])
    parts = [p.get_content_type() for p in mails["zoe@example.fr"].walk()]
    assert "text/html" in parts

    await client.post("/api/v1/auth/password-reset/request", json={"email": "zoe@example.fr"})

    def reset_mails() -> list[Any]:
        return [m for m in read_mails(mail_dir) if "initialisation du mot de passe" in mail_text(m)]

    [reset] = await eventually(reset_mails)
    assert reset["To"] == "zoe@example.fr"
