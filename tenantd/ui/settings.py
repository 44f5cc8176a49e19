"""The hosted pages' settings section (their brand is `email.settings.BrandSettings`)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from tenantd.settings import Section, env


class PageSettings(Section):
    """The hosted pages' own templates (TENANTD_UI, which turns them on, is
    `WebSettings.hosted_pages`)."""

    title: ClassVar[str] = "Hosted pages"

    templates_dir: Path | None = env(
        "TENANTD_UI_TEMPLATES_DIR",
        "A directory whose templates replace the shipped ones of the same name"
        " (tenantd/ui/templates).",
        default=None,
    )
