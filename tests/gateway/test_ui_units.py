"""The status page's pure parts: signed sessions and CSRF tokens, the redirect after
login, the groups and the countdown. No I/O."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from starlette.requests import Request

from toolsafe.gateway.auth import Authenticator
from toolsafe.gateway.ui.present import FILTERS, GROUPS, countdown
from toolsafe.gateway.ui.routes import _safe_next
from toolsafe.gateway.ui.session import COOKIE, Session, Sessions
from toolsafe.recovery.states import StepState

KEY = "k" * 40


def _request(cookie: str | None) -> Request:
    headers = [(b"cookie", f"{COOKIE}={cookie}".encode())] if cookie is not None else []
    return Request({"type": "http", "method": "GET", "path": "/ui/", "headers": headers})


def _signed_in(sessions: Sessions) -> Session:
    found = sessions.login("")
    assert isinstance(found, Session)
    return found


def test_a_session_cookie_round_trips_and_a_changed_one_is_refused() -> None:
    sessions = Sessions(Authenticator(None), KEY)  # development mode: no key store
    session = _signed_in(sessions)
    cookie = sessions.cookie_value(session)
    assert sessions.of(_request(cookie)) == session
    body, signature = cookie.split(".")
    flipped = body[:-1] + ("A" if body[-1] != "A" else "B")
    for forged in (f"{flipped}.{signature}", f"{body}.{signature[:-2]}", body, "", "a.b.c"):
        assert sessions.of(_request(forged)) is None, forged
    assert sessions.of(_request(None)) is None
    # Another key (another gateway without the shared TOOLSAFE_UI_SESSION_KEY): refused.
    assert Sessions(Authenticator(None), "x" * 40).of(_request(cookie)) is None


def test_an_expired_session_is_refused() -> None:
    sessions = Sessions(Authenticator(None), KEY)
    session = _signed_in(sessions)
    old = Session(session.principal, session.key_id, session.session_id, expires=1)
    assert sessions.of(_request(sessions.cookie_value(old))) is None


def test_the_csrf_token_belongs_to_one_session() -> None:
    sessions = Sessions(Authenticator(None), KEY)
    one, other = _signed_in(sessions), _signed_in(sessions)
    assert sessions.csrf_ok(one, sessions.csrf_token(one))
    assert not sessions.csrf_ok(one, sessions.csrf_token(other))
    assert not sessions.csrf_ok(one, None) and not sessions.csrf_ok(one, "")


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("/ui/steps/run_81/step_4", "/ui/steps/run_81/step_4"),
        ("/ui/?group=retry", "/ui/?group=retry"),
        ("//elsewhere.example/ui/", "/ui/"),
        ("https://elsewhere.example/ui/", "/ui/"),
        ("/ui/\\elsewhere", "/ui/"),
        ("/v1/tools", "/ui/"),
    ],
)
def test_login_returns_only_to_the_status_page(given: str, kept: str) -> None:
    assert _safe_next(given) == kept


def test_the_countdown_to_not_before() -> None:
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert countdown(None, now) == ""
    assert countdown(now - timedelta(seconds=1), now) == "due now"
    assert countdown(now + timedelta(seconds=9), now) == "in 9s"
    assert countdown(now + timedelta(seconds=65), now) == "in 1m 05s"
    assert countdown(now + timedelta(hours=2, minutes=3), now) == "in 2h 03m"


def test_every_state_is_in_exactly_one_group() -> None:
    placed = [state for group in GROUPS for state in group.states]
    assert sorted(placed) == sorted(StepState)
    assert [group.key for group in GROUPS[:4]] == ["input", "retry", "verifying", "approval"]
    assert FILTERS["succeeded"] == (StepState.SUCCEEDED,)
