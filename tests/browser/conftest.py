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


# Runs in every document before its own scripts (Playwright's init scripts are not subject to
# the page's policy) and reports each Content-Security-Policy violation to the test.
REPORT_CSP_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (e) => window.__kerneloptCspViolation({
  directive: e.effectiveDirective, blocked: e.blockedURI, url: e.documentURI, line: e.lineNumber,
}));
"""


@pytest.fixture
def csp_violations() -> list[dict]:
    """Every violation the browser reported, from the DOM event and from the console."""
    return []


@pytest.fixture
def page(browser, live_server, csp_violations):
    context = browser.new_context(base_url=live_server.url)
    context.set_default_timeout(15_000)
    context.expose_binding("__kerneloptCspViolation", lambda source, report: csp_violations.append(report))
    context.add_init_script(REPORT_CSP_VIOLATIONS)
    page = context.new_page()

    def on_console(message) -> None:
        if message.type == "error" and "Content Security Policy" in message.text:
            csp_violations.append({"console": message.text})

    page.on("console", on_console)
    yield page
    context.close()
    # Every browser test checks the policy too: no page it visited broke it.
    assert csp_violations == []


@pytest.fixture
def login(page):
    def login(username: str, password: str) -> None:
        page.goto("/login/")
        page.fill("#id_username", username)
        page.fill("#id_password", password)
        page.click("button[type=submit]")
        page.wait_for_url("**/")

    return login


@pytest.fixture
def screenshot(page, request, tmp_path):
    """`screenshot(name)` writes the whole page as `<name>.png` under the test's output
    directory: $KERNELOPT_SCREENSHOT_DIR/<test name>/ when set, else the test's tmp_path."""
    base = os.environ.get("KERNELOPT_SCREENSHOT_DIR")
    folder = Path(base) / request.node.name if base else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)

    def shoot(name: str, target=None) -> Path:
        path = folder / f"{name}.png"
        (target or page).screenshot(path=str(path), full_page=True)
        return path

    shoot.folder = folder
    return shoot
