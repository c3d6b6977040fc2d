"""Pure logic of issue 27's status-page and client fixes: the refusal sealed for a
session, the lookups' wording, the pause after a hold that ended early."""

from __future__ import annotations

import time

from toolsafe.gateway.auth import Authenticator
from toolsafe.gateway.client import EARLY_PAUSE, early_pause
from toolsafe.gateway.ui.present import lookup_result
from toolsafe.gateway.ui.session import Sessions

KEY = "k" * 32


def test_a_sealed_refusal_opens_only_for_its_session_and_unchanged() -> None:
    sessions = Sessions(Authenticator(None), KEY)
    mine = sessions.login("")
    other = sessions.login("")
    assert not isinstance(mine, str) and not isinstance(other, str)
    sealed = sessions.seal(mine, '{"action": "approve"}')
    assert sessions.unseal(mine, sealed) == '{"action": "approve"}'
    assert sessions.unseal(other, sealed) is None
    data, _, signature = sealed.partition(".")
    forged = sessions.seal(mine, '{"action": "cancel"}').partition(".")[0]
    assert sessions.unseal(mine, f"{forged}.{signature}") is None
    assert sessions.unseal(mine, data) is None
    assert sessions.unseal(mine, "") is None


def test_each_lookup_says_what_it_found_or_which_code_failed() -> None:
    unavailable = {"lookup": {"unavailable": True, "code": "LOOKUP_HTTP_503"}}
    assert lookup_result(unavailable) == "lookup unavailable: LOOKUP_HTTP_503"
    assert lookup_result({"lookup": {"found": True, "evidence_ref": "inv_1"}}) == "found (inv_1)"
    assert lookup_result({"lookup": {"found": False}}) == "not found"
    assert lookup_result({"envelope": {}}) == ""


def test_a_hold_that_ended_early_is_asked_again_after_a_pause() -> None:
    assert early_pause(asked=0.0, deadline=1e12) == 0.0  # asked long ago: it lasted
    # Asked just now, returned at once: pause, never past the deadline.
    now = time.monotonic()
    assert 0 < early_pause(asked=now, deadline=now + 100) <= EARLY_PAUSE
    assert early_pause(asked=now, deadline=now - 1) == 0.0
