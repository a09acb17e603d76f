"""#46 defect 5: a locked-out person reads why on the login page. Headless Chromium against a studio served in this
process with a users file and a limiter of 2 failures per name and address (600 s window).

Before: after the limit, POST /login answered 429 and Gradio's form showed nothing, so the right password then
seemed to fail for no reason. Now: two wrong passwords -> "Incorrect Credentials" (Gradio's own); the right
password -> the studio's note "The name "alice" is locked out from this address ... for 10 min more ... even with
the right password" with a countdown. Screenshot: artifacts/screenshots/login_lockout.png.
"""
from __future__ import annotations

import re

import pytest

from tests.paths import DEMO
from evorag_core.procs import free_port
from tests.studio_process import CHROMIUM, shot

pytestmark = [pytest.mark.browser]

pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")


@pytest.fixture(scope="module")
def studio(session_home, tmp_path_factory):
    from app.common.services import Services
    from app.shell.main import launch
    from evorag_core.auth.limiter import LoginLimiter, LoginLimits
    from evorag_core.auth.users_file import add_user
    from evorag_core.config import load_config

    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: `apt-get install -y chromium` to run the browser tests")
    work = tmp_path_factory.mktemp("login_browser")
    users = work / "users.toml"
    add_user(users, "alice", "alice's password")
    svc = Services(load_config(), session_home, data_path=DEMO, db_url=f"sqlite:///{work / 'studio.db'}")
    port = free_port()
    limiter = LoginLimiter(LoginLimits(per_user=2, per_address=20, window_s=600))
    demo = launch(svc, host="127.0.0.1", port=port, auth=str(users), block=False, quiet=True, limiter=limiter)
    yield f"http://127.0.0.1:{port}/"
    demo.close()
    svc.close()


def _log_in(page, password: str) -> None:
    page.locator("input[type=text], textarea").first.fill("alice")
    page.locator("input[type=password]").fill(password)
    page.get_by_role("button", name="Login").click()


def test_a_locked_out_login_says_who_is_locked_out_and_for_how_long(studio, browser):
    page = browser.new_page(viewport={"width": 1100, "height": 700})
    page.set_default_timeout(60_000)
    try:
        page.goto(studio)
        page.wait_for_selector("input[type=password]")
        for _ in range(2):
            _log_in(page, "a wrong guess")
            page.get_by_text("Incorrect Credentials").wait_for()
            page.wait_for_function("document.querySelector('input[type=password]').value === ''")
        assert page.locator("#evo-login-lockout").count() == 0
        _log_in(page, "alice's password")
        note = page.locator("#evo-login-lockout")
        note.wait_for()
        text = note.inner_text()
        assert "The name \u201calice\u201d is locked out from this address after too many failed logins" in text
        assert re.search(r"for (10 min|9 min \d\d? s) more\. ", text) and "even with the right password" in text
        page.wait_for_function("/Try again in (9:5\\d|10:00)\\./.test("
                               "document.querySelector('#evo-login-lockout .evo-lockout-left').innerText)")
        assert note.get_attribute("role") == "alert"
        assert not page.get_by_text("Incorrect Credentials").is_visible()  # an earlier try's: the password is right
        shot(page, "login_lockout")
    finally:
        page.close()
