"""Hosted pages' knobs, parsed from `Settings.extra` (every TENANTD_* variable) once per
process: TENANTD_UI turns the pages on (default) or off, the others restyle them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tenantd.settings import Settings, SettingsError

_COLOR = re.compile(r"^#[0-9a-fA-F]{3}([0-9a-fA-F]{3})?$")
DEFAULT_ACCENT = "#4f46e5"


@dataclass(frozen=True)
class UiConfig:
    enabled: bool = True
    brand_name: str = "tenantd"
    logo_url: str | None = None
    accent_color: str = DEFAULT_ACCENT
    templates_dir: Path | None = None


def _flag(value: str, name: str) -> bool:
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise SettingsError(f"{name} must be a boolean (true/false), got {value!r}")


def ui_config(settings: Settings) -> UiConfig:
    return _parse(
        tuple(sorted((k, v) for k, v in settings.extra.items() if k.startswith("TENANTD_UI")))
    )


@cache
def _parse(items: tuple[tuple[str, str], ...]) -> UiConfig:
    env = dict(items)
    accent = env.get("TENANTD_UI_ACCENT_COLOR", "").strip() or DEFAULT_ACCENT
    if not _COLOR.match(accent):
        raise SettingsError(f"TENANTD_UI_ACCENT_COLOR must be a #rgb or #rrggbb colour: {accent!r}")
    templates = env.get("TENANTD_UI_TEMPLATES_DIR", "").strip()
    return UiConfig(
        enabled=_flag(env.get("TENANTD_UI", "true") or "true", "TENANTD_UI"),
        brand_name=env.get("TENANTD_UI_BRAND_NAME", "").strip() or "tenantd",
        logo_url=env.get("TENANTD_UI_LOGO_URL", "").strip() or None,
        accent_color=accent,
        templates_dir=Path(templates).absolute() if templates else None,
    )
