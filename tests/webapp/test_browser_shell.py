"""The expert logs in through a real browser and sees the shell."""

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_the_expert_logs_in_and_sees_the_shell(page, live_server, expert, tmp_path):
    page.goto(f"{live_server.url}/")
    assert "/login/" in page.url
    page.fill("#id_username", expert.username)
    page.fill("#id_password", "correct horse battery")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    assert page.locator("h1").inner_text() == "Welcome, erin_expert"
    assert page.locator(".topbar .badge").all_inner_texts() == ["expert"]
    assert page.locator('[data-role="expert"]').is_visible()
    assert page.locator(".mainnav a").all_inner_texts() == ["Home", "Tasks", "Runs", "Traces"]
    # htmx is served from our own static files and loaded.
    assert page.evaluate("typeof window.htmx") == "object"
    page.screenshot(path=str(tmp_path / "expert-home.png"), full_page=True)
    assert (tmp_path / "expert-home.png").stat().st_size > 5000


def test_a_failed_login_shows_the_message(page, live_server, expert):
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", expert.username)
    page.fill("#id_password", "not it")
    page.click("button[type=submit]")
    assert "do not match an account" in page.locator("[role=alert]").inner_text()
