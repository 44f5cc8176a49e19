"""Every shipped HTML email extends the one branded layout (issue 28, part 8): product name,
logo or mark, accent colour from the pages' brand settings, a plain-text part, dark-mode safe
(color-scheme meta; every box sets its text colour with its background), inline styles. Two
rendered mails are shot in Chromium, light and dark (`TENANTD_SCREENSHOTS_DIR=docs/screenshots`
refreshes the manual's pictures)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

import tenantd
from tenantd.accounts import mail as account_mail
from tenantd.app.settings import load_settings
from tenantd.auth import mail as auth_mail
from tenantd.email import templates
from tenantd.email.message import EmailMessage
from tenantd.notifications.channels.email import render_email
from tenantd.notifications.registry import RegisteredEvent
from tenantd.notifications.tenancy import events as tenancy
from tenantd.settings import Settings
from tests.ui.live import CHROMIUM, CHROMIUM_ARGS, MISSING_CHROMIUM, screenshots_dir

PACKAGE = Path(tenantd.__file__).parent
BRAND = "Acme Cloud"
ACCENT = "#0f766e"
LINK = "https://app.acme.example/verify-email?token=abc"


@pytest.fixture
def branded(env: dict[str, str]) -> Settings:
    """A deployment with a brand of its own: its pages' brand is every mail's."""
    return load_settings(
        environ={
            **env,
            "TENANTD_UI_BRAND_NAME": BRAND,
            "TENANTD_UI_ACCENT_COLOR": ACCENT,
            "PUBLIC_BASE_URL": "https://app.acme.example",
        }
    )


def notification(
    settings: Settings, event_type: str, payload: dict[str, str], cta: str
) -> EmailMessage:
    registered = RegisteredEvent(
        next(d for d in tenancy.EVENTS if d.type == event_type), Path(tenancy.__file__).parent
    )
    assert registered.definition.email is not None
    model = registered.definition.schema.model_validate(payload)
    content = registered.definition.email("user", model)
    text, markup = render_email(
        registered,
        content,
        {
            "unsubscribe_url": "https://app.acme.example/unsubscribe?token=t",
            "digest": None,
            "notification": {
                "id": "1",
                "title": "t",
                "body": "b",
                "cta_url": cta,
                "cta_label": "c",
            },
        },
        brand=templates.brand_of(settings),
        base_url="https://app.acme.example",
    )
    assert markup is not None
    return EmailMessage(to="a@corp.example", subject=content.subject, text=text, html=markup)


TENANCY = {"accountId": str(uuid.uuid4()), "accountName": "Acme", "membershipId": "m1"}
TO = "a@corp.example"

# Every shipped HTML mail, built by the functions that send it, for a deployment's settings.
MAILS: dict[str, Callable[[Settings], EmailMessage]] = {
    "verify_email": lambda s: auth_mail.verification(TO, settings=s, link=LINK, first_name="Ann"),
    "verify_email.fr": lambda s: auth_mail.verification(TO, settings=s, link=LINK, locale="fr"),
    "password_reset": lambda s: auth_mail.password_reset(TO, settings=s, link=LINK, ttl_minutes=30),
    "password_reset.fr": lambda s: auth_mail.password_reset(
        TO, settings=s, link=LINK, ttl_minutes=30, locale="fr"
    ),
    "account_exists": lambda s: auth_mail.account_exists(TO, settings=s),
    "session_reused": lambda s: auth_mail.session_reused(TO, settings=s),
    "email_code": lambda s: auth_mail.email_code(
        TO, code="042137", link=LINK, ttl_minutes=10, settings=s
    ),
    "new_signin": lambda s: auth_mail.new_signin(
        TO,
        settings=s,
        device="Firefox on Linux",
        ip="203.0.113.7",
        time="27 Nov 2026, 08:30 UTC",
        method="password",
    ),
    "invitation": lambda s: account_mail._shipped(
        TO,
        "invitation",
        {"inviter": "Ann Lee", "account_name": "Acme", "role": "admin", "link": LINK},
        s,
    ),
    "join_request": lambda s: account_mail.join_request(
        TO,
        settings=s,
        requester="bob@corp.example",
        domain="corp.example",
        account_id=uuid.uuid4(),
        account_name="Acme",
    ),
    "join_request_sent": lambda s: account_mail.join_request_sent(
        TO, settings=s, domain="corp.example"
    ),
    "member_joined": lambda s: notification(
        s,
        tenancy.MEMBER_JOINED,
        {**TENANCY, "memberUserId": "u1", "memberName": "Bob", "role": "member"},
        "https://app.acme.example/accounts",
    ),
    "role_changed": lambda s: notification(
        s,
        tenancy.ROLE_CHANGED,
        {**TENANCY, "actorName": "Ann", "role": "admin", "previousRole": "member"},
        "https://app.acme.example/accounts",
    ),
}


@pytest.fixture
def mails(branded: Settings) -> dict[str, EmailMessage]:
    return {name: build(branded) for name, build in MAILS.items()}


def mail_templates() -> list[Path]:
    """Every HTML file of the package outside the hosted pages and the layout itself."""
    return sorted(
        path
        for path in PACKAGE.rglob("*.html")
        if "ui" not in path.relative_to(PACKAGE).parts[:1] and path.parent != templates.LAYOUT_DIR
    )


def test_every_shipped_html_mail_extends_the_one_layout() -> None:
    found = mail_templates()
    assert len(found) >= len(MAILS)
    for path in found:
        assert path.read_text().startswith('{% extends "_layout.html" %}'), path
    # ... and each of them is rendered below.
    names = {path.name.removesuffix(".html") for path in found}
    assert names == set(MAILS), names ^ set(MAILS)


def test_each_mail_is_branded_dark_mode_safe_and_has_a_text_part(
    mails: dict[str, EmailMessage],
) -> None:
    for name, message in mails.items():
        markup = message.html
        assert markup is not None, name
        assert markup.startswith("<!DOCTYPE html>"), name
        assert f"{BRAND}</span>" in markup and f"<title>{BRAND}</title>" in markup, name
        assert ACCENT in markup, name
        assert '<meta name="color-scheme" content="light dark">' in markup, name
        assert "prefers-color-scheme: dark" in markup, name
        # Inline styles: a box that sets a background sets its text colour too.
        for style in re.findall(r'style="([^"]*)"', markup):
            if re.search(r"(^|;)\s*background:", style):
                assert re.search(r"(^|;)\s*color:", style), (name, style)
        # The plain-text part: always there, words and links, no markup.
        assert message.text and message.text.strip(), name
        assert "<" not in message.text and "{{" not in message.text, name
    assert "app.acme.example/verify-email?token=abc" in mails["verify_email"].text
    assert 'lang="fr"' in mails["verify_email.fr"].html  # type: ignore[operator]
    assert "app.acme.example</a>" in mails["invitation"].html  # type: ignore[operator]


def test_a_logo_replaces_the_mark(env: dict[str, str]) -> None:
    settings = load_settings(environ={**env, "TENANTD_UI_LOGO_URL": "https://cdn.example/l.png"})
    markup = auth_mail.verification(TO, settings=settings, link=LINK).html
    assert markup is not None and '<img src="https://cdn.example/l.png"' in markup


def test_two_deployments_in_one_process_each_mail_in_their_own_brand(
    env: dict[str, str], branded: Settings
) -> None:
    """The brand comes with the settings a mail is built for, not from a process global."""
    plain = load_settings(environ=env)
    for build in (MAILS["verify_email"], MAILS["email_code"], MAILS["member_joined"]):
        ours, theirs = build(branded).html, build(plain).html
        assert ours is not None and theirs is not None
        assert f"<title>{BRAND}</title>" in ours and ACCENT in ours
        assert BRAND not in theirs and ACCENT not in theirs


LUMINANCE = """(selector) => {
  const rgb = (value) => value.match(/\\d+(\\.\\d+)?/g).slice(0, 3).map(Number);
  const lum = ([r, g, b]) => [r, g, b].map((c) => {
    c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
  }).reduce((sum, c, i) => sum + c * [0.2126, 0.7152, 0.0722][i], 0);
  const style = getComputedStyle(document.querySelector(selector));
  const fg = lum(rgb(style.color)), bg = lum(rgb(style.backgroundColor));
  return {fg, bg, ratio: (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05)};
}"""


def test_rendered_mails_in_chromium_light_and_dark(mails: dict[str, EmailMessage]) -> None:
    if not CHROMIUM.exists():
        pytest.fail(MISSING_CHROMIUM, pytrace=False)
    folder = screenshots_dir()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            for name in ("verify_email", "invitation"):
                markup = mails[name].html
                assert markup is not None and BRAND in markup
                for scheme in ("light", "dark"):
                    context = browser.new_context(
                        viewport={"width": 640, "height": 360}, color_scheme=scheme
                    )
                    page = context.new_page()
                    page.set_content(markup)
                    card = page.evaluate(LUMINANCE, ".td-card")
                    assert card["ratio"] >= 7, (name, scheme, card)  # readable text on the card
                    if scheme == "dark":
                        assert card["bg"] < 0.1 and card["fg"] > 0.5, card  # light on dark
                    else:
                        assert card["bg"] > 0.9 and card["fg"] < 0.1, card  # dark on light
                    button = page.evaluate(LUMINANCE, ".td-button")
                    assert button["ratio"] >= 4.5, (name, scheme, button)
                    assert BRAND in page.inner_text("body")
                    shot = page.screenshot(full_page=True)
                    context.close()
                    assert shot.startswith(b"\x89PNG") and len(shot) > 5_000
                    (folder / f"email-{name.replace('_', '-')}-{scheme}.png").write_bytes(shot)
        finally:
            browser.close()
