"""When a verification's "not found" is final, and whether a request of an earlier
attempt may still reach the downstream: the time rules ``decide`` applies. No I/O."""

from __future__ import annotations

from datetime import datetime

from toolsafe.adapters import codes
from toolsafe.recovery.outcomes import StepSnapshot


def not_found_final_at(step: StepSnapshot) -> datetime | None:
    """When a lookup's "not found" for ``step`` is final (None: no send time, final now).

    The original call may run until ``longest_call`` after its claim, and its write show
    up a consistency window later. With a downstream that deduplicates by key, a retry
    carries the same key as any late request, so "not found" is final for a retry one
    window after the send. Not when no attempt is left (no retry follows: a late request
    would be a first effect, and the step would be closed as not written), nor while the
    downstream's last answer was "key in flight" (a request with the key is being
    processed and may yet commit): then the longest call is waited out as without it.
    """
    if step.last_sent_at is None:
        return None
    traits = step.traits
    retry_follows = step.max_attempts - step.attempts > 0
    if traits.deduplicates_by_key and retry_follows and not _key_in_flight(step):
        return step.last_sent_at + traits.consistency_window
    return step.last_sent_at + traits.longest_call + traits.consistency_window


def _key_in_flight(step: StepSnapshot) -> bool:
    """The step verifies because the downstream answered "this key is in flight"."""
    shown = step.envelope
    return shown is not None and shown.get("code") == codes.IDEMPOTENCY_KEY_IN_FLIGHT


def may_still_land(step: StepSnapshot, now: datetime) -> bool:
    """Waiting to retry on a deduplicating downstream's "not found" that came before the
    longest call was over: the killed attempt's request may still arrive, and only the
    retry's key would deduplicate it."""
    traits, shown = step.traits, step.envelope
    return (
        traits.deduplicates_by_key
        and step.last_sent_at is not None
        and shown is not None
        and shown.get("code") == codes.OPERATION_NOT_FOUND
        and now < step.last_sent_at + traits.longest_call + traits.consistency_window
    )


def follows_early_absence(step: StepSnapshot, now: datetime) -> bool:
    """This attempt retries a deduplicating downstream's "not found" (the envelope the
    step still shows), claimed less than the longest call plus the window ago: the
    killed attempt's request may still land after this attempt's own answer, so a
    refusal of this attempt does not prove the step unwritten. (Its claim is later than
    the killed attempt's, so the bound errs on the long side.)"""
    shown = step.envelope
    return (
        step.traits.deduplicates_by_key
        and step.last_sent_at is not None
        and shown is not None
        and shown.get("code") == codes.OPERATION_NOT_FOUND
        and now < step.last_sent_at + step.traits.longest_call + step.traits.consistency_window
    )
