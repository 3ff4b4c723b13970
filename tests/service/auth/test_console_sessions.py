"""Console sessions over the API: a cookie that names a token, CSRF on changes, and an
end that holds on the server."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from service.app import create_app
from service.auth import sessions
from service.settings import Settings
from tests.conftest import job_spec


def _browser(settings: Settings) -> TestClient:
    return TestClient(create_app(settings))


def _sign_in(browser: TestClient, token: str) -> str:
    response = browser.post("/v1/session", json={"token": token})
    assert response.status_code == 200, response.text
    assert "httponly" in response.headers["set-cookie"].lower()
    assert "samesite=strict" in response.headers["set-cookie"].lower()
    return str(response.json()["csrf_token"])


def test_a_session_reads_and_changes_only_with_its_csrf_token(
    settings: Settings, admin_token: str, source_dir: Path
) -> None:
    with _browser(settings) as browser:
        csrf = _sign_in(browser, admin_token)
        assert browser.get("/v1/training-jobs").status_code == 200
        assert browser.get("/v1/me").json()["csrf_token"] == csrf
        spec = job_spec(source_dir)
        forged = browser.post("/v1/training-jobs", json=spec)  # as a cross-site form would
        assert forged.status_code == 403
        wrong = browser.post("/v1/training-jobs", json=spec, headers={"X-CSRF-Token": "x"})
        assert wrong.status_code == 403
        sent = browser.post("/v1/training-jobs", json=spec, headers={"X-CSRF-Token": csrf})
        assert sent.status_code == 201, sent.text


def test_signing_out_ends_the_session_for_every_copy_of_its_cookie(
    settings: Settings, admin_token: str
) -> None:
    with _browser(settings) as browser, _browser(settings) as thief:
        _sign_in(browser, admin_token)
        copied = browser.cookies[sessions.COOKIE]
        thief.cookies.set(sessions.COOKIE, copied)
        assert thief.get("/v1/me").status_code == 200
        assert browser.delete("/v1/session").status_code == 204
        assert browser.get("/v1/me").status_code == 401
        assert thief.get("/v1/me").status_code == 401
        # The token itself still works.
        assert (
            thief.get("/v1/me", headers={"Authorization": f"Bearer {admin_token}"}).status_code
            == 200
        )


def test_a_forged_or_tampered_cookie_is_refused(settings: Settings, admin_token: str) -> None:
    with _browser(settings) as browser:
        _sign_in(browser, admin_token)
        value = browser.cookies[sessions.COOKIE]
    body, _, mac = value.partition(".")
    for bad in (f"{body}.{'0' * len(mac)}", "not-a-session", f"{body[:-2]}AA.{mac}", value):
        with _browser(settings) as forger:
            forger.cookies.set(sessions.COOKIE, bad)
            expected = 200 if bad == value else 401  # the genuine one, to show the way works
            assert forger.get("/v1/me").status_code == expected, bad


def test_signing_in_with_a_bad_token_sets_nothing(settings: Settings, admin_token: str) -> None:
    with _browser(settings) as browser:
        refused = browser.post("/v1/session", json={"token": "ry_not-a-token"})
        assert refused.status_code == 401
        assert sessions.COOKIE not in refused.headers.get("set-cookie", "")


def test_revoking_the_token_ends_its_sessions(
    settings: Settings, admin_token: str, api: TestClient
) -> None:
    minted = api.post("/v1/tokens", json={"name": "laptop", "role": "viewer"}).json()["token"]
    with _browser(settings) as browser:
        _sign_in(browser, minted)
        assert browser.get("/v1/me").status_code == 200
        assert api.delete("/v1/tokens/laptop").status_code == 204
        assert browser.get("/v1/me").status_code == 401


def test_no_other_site_may_show_a_console_page_in_a_frame(settings: Settings) -> None:
    with _browser(settings) as browser:
        for path in ("/", "/sign-in", "/jobs/job-1", "/submit", "/capacity"):
            page = browser.get(path)
            assert page.status_code == 200, path
            assert "frame-ancestors 'none'" in page.headers["content-security-policy"], path
            assert page.headers["x-frame-options"] == "DENY", path
