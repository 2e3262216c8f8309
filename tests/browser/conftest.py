"""Headless Debian Chromium driven by Playwright against pytest-django's live server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = Path(os.environ.get("KERNELOPT_CHROMIUM", "/usr/bin/chromium"))
# Without the background-networking flags Chromium keeps dialling out on a closed network.
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]

# Playwright's sync API runs an event loop in this thread; the ORM calls the tests make
# between page actions are still synchronous and safe.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "1")


def pytest_collection_modifyitems(config, items) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.browser)
            if not CHROMIUM.exists():
                item.add_marker(
                    pytest.mark.skip(
                        reason=f"{CHROMIUM} is absent (apt-get install chromium; make test does)"
                    )
                )


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, live_server):
    context = browser.new_context(base_url=live_server.url)
    context.set_default_timeout(15_000)
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture
def login(page):
    def login(username: str, password: str) -> None:
        page.goto("/login/")
        page.fill("#id_username", username)
        page.fill("#id_password", password)
        page.click("button[type=submit]")
        page.wait_for_url("**/")

    return login
