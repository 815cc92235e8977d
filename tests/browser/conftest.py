"""Fixtures of the browser suite: one headless Debian Chromium per session (never a
downloaded browser), one trionsq cluster with nsqadmin per session, and a fresh browser
context and page per test that accepts confirmation dialogs and records their text."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from .cluster import Cluster

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]

VIEWPORT = {"width": 1280, "height": 800}


def chromium_executable() -> str:
    return os.environ.get("TRIONSQ_CHROMIUM", "/usr/bin/chromium")


def _unavailable(reason: str) -> None:
    if os.environ.get("TRIONSQ_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason} (TRIONSQ_REQUIRE_BROWSER=1)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def playwright_sync() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("Playwright is not installed (pip install -e '.[test]')")
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="session")
def browser(playwright_sync: Any) -> Iterator[Any]:
    exe = chromium_executable()
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)) and not shutil.which(exe):
        _unavailable(f"no Chromium at {exe} (apt-get install chromium, or set TRIONSQ_CHROMIUM)")
    browser = playwright_sync.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
    try:
        yield browser
    finally:
        browser.close()


@pytest.fixture(scope="session")
def cluster(browser: Any) -> Iterator[Cluster]:
    # Depends on `browser` so that a skipped browser skips before any daemon starts.
    c = Cluster(nodes=2)
    try:
        yield c
    finally:
        c.close()


class Dialogs:
    """Accepts every confirm() and keeps its text (`dismiss_next` to answer Cancel once)."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.dismiss_next = False

    def __call__(self, dialog: Any) -> None:
        self.messages.append(dialog.message)
        if self.dismiss_next:
            self.dismiss_next = False
            dialog.dismiss()
        else:
            dialog.accept()


@pytest.fixture
def dialogs() -> Dialogs:
    return Dialogs()


def new_page(browser: Any, dialogs: Dialogs, **context_options: Any) -> tuple[Any, Any, list[str]]:
    context = browser.new_context(viewport=VIEWPORT, **context_options)
    context.set_default_timeout(10_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("dialog", dialogs)
    return context, page, errors


@pytest.fixture
def page(browser: Any, dialogs: Dialogs) -> Iterator[Any]:
    from playwright.sync_api import expect

    expect.set_options(timeout=10_000)
    context, page, errors = new_page(browser, dialogs)
    try:
        yield page
    finally:
        context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


@pytest.fixture
def make_page(browser: Any, dialogs: Dialogs) -> Iterator[Any]:
    """Open more pages with their own context options (extra_http_headers=...)."""
    contexts: list[Any] = []
    all_errors: list[list[str]] = []

    def make(**options: Any) -> Any:
        context, page, errors = new_page(browser, dialogs, **options)
        contexts.append(context)
        all_errors.append(errors)
        return page

    try:
        yield make
    finally:
        for context in contexts:
            context.close()
    errors = [e for errs in all_errors for e in errs]
    assert not errors, f"JavaScript errors on the page: {errors}"
