"""Browser-test fixtures: one `tenantd serve` process and one Chromium per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright

from tests.ui.live import (
    CHROMIUM,
    CHROMIUM_ARGS,
    DESKTOP,
    MISSING_CHROMIUM,
    LiveServer,
    start_server,
)


@pytest.fixture(scope="module")
def live_env() -> dict[str, str]:
    """Extra environment of the module's server (a module overrides this to add knobs)."""
    return {}


@pytest.fixture(scope="module")
def live(
    migrated: str, tmp_path_factory: pytest.TempPathFactory, live_env: dict[str, str]
) -> Iterator[LiveServer]:
    server = start_server(migrated, tmp_path_factory.mktemp("live"), **live_env)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(MISSING_CHROMIUM, pytrace=False)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def context(browser: Browser, live: LiveServer) -> Iterator[BrowserContext]:
    ctx = browser.new_context(base_url=live.base, viewport=DESKTOP)
    ctx.set_default_timeout(30_000)
    try:
        yield ctx
    finally:
        ctx.close()


@pytest.fixture
def page(context: BrowserContext) -> Page:
    return context.new_page()
