"""Jinja2 rendering of the transactional emails shipped with tenantd."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

TEMPLATE_DIR = Path(__file__).parent / "templates"


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE_DIR),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html",), default=False),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )


def render(name: str, variables: dict[str, Any]) -> tuple[str, str, str]:
    """Return (subject, text, html) of templates/<name>.{subject,txt,html}."""
    env = environment()
    subject = env.get_template(f"{name}.subject.txt").render(**variables).strip()
    text = env.get_template(f"{name}.txt").render(**variables)
    html = env.get_template(f"{name}.html").render(**variables)
    return subject, text, html
