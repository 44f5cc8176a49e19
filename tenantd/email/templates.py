"""Jinja2 rendering of the transactional emails shipped with tenantd, and what every HTML
email needs before it is sent: one branded layout, links a mail client can follow and a
plain-text part."""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import jinja2

from tenantd.email.settings import DEFAULT_ACCENT, DEFAULT_BRAND_NAME, BrandSettings
from tenantd.settings import Settings

TEMPLATE_DIR = Path(__file__).parent / "templates"
LAYOUT_DIR = Path(__file__).parent / "layout"  # _layout.html, _mail.html (macros)

_LINK_ATTRIBUTE = re.compile(r"""(?i)(\s(?:href|src)\s*=\s*)(["'])(.*?)\2""", re.S)


# --- the brand of every HTML email (issue 28) ----------------------------------------------


@dataclass(frozen=True)
class Brand:
    """What the mail layout shows: the hosted pages' brand settings and the public address."""

    name: str = DEFAULT_BRAND_NAME
    logo_url: str | None = None
    accent_color: str = DEFAULT_ACCENT
    base_url: str = ""

    @property
    def host(self) -> str:
        return urlsplit(self.base_url).netloc or self.base_url


def brand_of(settings: Settings) -> Brand:
    """The brand of TENANTD_UI_BRAND_NAME, TENANTD_UI_LOGO_URL and TENANTD_UI_ACCENT_COLOR
    (a bad colour stops start-up): one object per configuration, which every mail builder
    and the EmailService share."""
    return _brand(settings.section(BrandSettings), settings.public_base_url)


@lru_cache(maxsize=8)  # one a configuration (tests hold a few)
def _brand(section: BrandSettings, public_base_url: str) -> Brand:
    return Brand(
        name=section.brand_name,
        logo_url=section.logo_url,
        accent_color=section.accent_color,
        base_url=public_base_url.rstrip("/"),
    )


def mail_environment(
    folders: Iterable[Path], brand: Brand, *, extensions: tuple[str, ...] = ("html",)
) -> jinja2.Environment:
    """A Jinja2 environment for mail templates in `folders`, which can also extend the one
    layout (`{% extends "_layout.html" %}`) and import its macros (`_mail.html`). The layout
    and the macros show `brand`: a global of the environment, because imported macros see
    the environment's globals and not the context a template is rendered with."""
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(
            [jinja2.FileSystemLoader(folder) for folder in folders]
            + [jinja2.FileSystemLoader(LAYOUT_DIR)]
        ),
        autoescape=jinja2.select_autoescape(enabled_extensions=extensions, default=False),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.globals["brand"] = brand
    return env


@lru_cache(maxsize=4)  # one brand a configuration
def environment(brand: Brand) -> jinja2.Environment:
    return mail_environment([TEMPLATE_DIR], brand)


def render(
    name: str, variables: dict[str, Any], *, brand: Brand, locale: str | None = None
) -> tuple[str, str, str]:
    """Return (subject, text, html) of templates/<name>.{subject,txt,html} in `brand`'s layout;
    with a locale, each part is `<name>.<locale>.<ext>` when shipped, else the English
    `<name>.<ext>`."""
    env = environment(brand)

    def part(ext: str) -> jinja2.Template:
        names = [f"{name}.{ext}"]
        if locale and _LOCALE.fullmatch(locale):
            names.insert(0, f"{name}.{locale}.{ext}")
        return env.select_template(names)

    subject = part("subject.txt").render(**variables).strip()
    text = part("txt").render(**variables)
    html = part("html").render(**variables)
    return subject, text, html


# --- languages (issue 18) ---------------------------------------------------------------

SUPPORTED_LOCALES = ("en", "fr")  # the transactional emails ship in these
_LOCALE = re.compile(r"[a-z]{2,3}")
_LANGUAGE_RANGE = re.compile(
    r"^\s*([A-Za-z]{1,8})(?:-[A-Za-z0-9]{1,8})*\s*(?:;\s*q\s*=\s*([0-9.]+))?\s*$"
)


def best_locale(
    accept_language: str | None, supported: tuple[str, ...] = SUPPORTED_LOCALES
) -> str | None:
    """The supported language the header prefers most (its primary subtag), or None."""
    if not accept_language or len(accept_language) > 1024:
        return None
    ranked: list[tuple[float, int, str]] = []
    for index, item in enumerate(accept_language.split(",")[:32]):
        match = _LANGUAGE_RANGE.match(item)
        if match is None:
            continue
        try:
            weight = float(match.group(2)) if match.group(2) is not None else 1.0
        except ValueError:
            continue
        language = match.group(1).lower()
        if weight > 0 and language in supported:
            ranked.append((-weight, index, language))
    return min(ranked)[2] if ranked else None


def absolute_url(url: str, base_url: str) -> str:
    """A link as a mail client must get it: relative ones resolved against PUBLIC_BASE_URL
    (a mail has no page address to resolve them against). `/c/1` -> `{base_url}/c/1`."""
    link = url.strip()
    if not link or link.startswith("#"):
        return url  # in-document anchor
    if link.startswith("//"):
        return f"{urlsplit(base_url).scheme}:{link}"
    if urlsplit(link).scheme:
        return url  # https:, mailto:, tel:, ...
    base = base_url.rstrip("/")
    if link.startswith("/"):
        return base + link  # under the base's own path, like every link tenantd builds
    return urljoin(base + "/", link)


def absolute_links(markup: str, base_url: str) -> str:
    """The HTML with every relative href/src resolved against PUBLIC_BASE_URL."""

    def resolve(match: re.Match[str]) -> str:
        prefix, quote, value = match.groups()
        # The value is HTML-escaped text; the base goes in escaped the same way.
        resolved = absolute_url(value, html.escape(base_url, quote=True))
        return f"{prefix}{quote}{resolved}{quote}"

    return _LINK_ATTRIBUTE.sub(resolve, markup)


def html_to_text(markup: str) -> str:
    """A plain-text part for an HTML-only template: links kept, tags dropped. The <head>
    (title, styles) is nothing a reader sees, so it is not text either."""
    text = re.sub(r"(?is)<head\b.*?</head>", "", markup)
    text = re.sub(r"(?is)<(script|style|title)\b.*?</\1>", "", text)
    text = re.sub(
        r'(?is)<a\b[^>]*href=["\']([^"\']+)["\'][^>]*>(.*?)</a>',
        lambda m: f"{m.group(2)} ({m.group(1)})",
        text,
    )
    text = re.sub(r"(?i)<br\s*/?>", "\n", text)
    text = re.sub(r"(?i)</(p|div|h[1-6]|li|tr)>", "\n\n", text)
    text = re.sub(r"<[^>]+>", "", text)
    text = html.unescape(text)
    text = re.sub(r"[ \t]+", " ", text)
    text = re.sub(r"\n\s*\n\s*\n+", "\n\n", text)
    return text.strip() + "\n"
