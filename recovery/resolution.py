"""What an operator's resolution of an escalated step must carry (DESIGN §5): evidence
to close it as succeeded, a statement that nothing was written to close as failed a write
that may have happened. Pure: no I/O."""

from __future__ import annotations

import re
from typing import Final

from toolsafe.adapters.redaction import clean_text, find_secrets, looks_like_instructions
from toolsafe.recovery import reasons as R
from toolsafe.recovery.outcomes import Resolved, StepSnapshot, TransitionRefused
from toolsafe.recovery.states import StepState

# A downstream reference: an id, a URL or a path, a short note; no markup, no newlines.
_EVIDENCE_CHARS: Final = re.compile(r"^[A-Za-z0-9 _.,:;/()+\-#?=&%@~]+$")


def checked_evidence(evidence: str | None) -> str:
    """The evidence as recorded, or ``TransitionRefused`` naming what is wrong with it."""
    text = (evidence or "").strip()
    if not text:
        raise TransitionRefused(
            R.EVIDENCE_REQUIRED,
            "closing a step as succeeded needs evidence: a reference to the effect "
            "downstream (an invoice id, a message id, a URL)",
        )
    if len(text) > R.MAX_EVIDENCE:
        raise TransitionRefused(
            R.EVIDENCE_INVALID,
            f"the evidence is {len(text)} characters long; at most {R.MAX_EVIDENCE}",
        )
    if clean_text(text) != text or not _EVIDENCE_CHARS.fullmatch(text):
        raise TransitionRefused(
            R.EVIDENCE_INVALID,
            "the evidence holds characters a reference does not: use letters, digits, "
            "spaces and _.,:;/()+-#?=&%@~",
        )
    if find_secrets(text) or looks_like_instructions(text):
        raise TransitionRefused(
            R.EVIDENCE_INVALID,
            "the evidence looks like a secret or an instruction; give the downstream's "
            "reference only",
        )
    return text


def may_have_written(step: StepSnapshot) -> bool:
    """Whether the step's write may have reached the downstream: only ``not_committed``
    (shown to have done nothing) says it did not."""
    return step.traits.writes and step.commit_state != "not_committed"


def check_resolution(step: StepSnapshot, outcome: Resolved) -> None:
    """Refuse a resolution that does not carry what its target needs."""
    if outcome.to is StepState.SUCCEEDED:
        checked_evidence(outcome.evidence)
        if outcome.confirm_not_written:
            raise TransitionRefused(
                R.INVALID_RESOLUTION,
                "confirm_not_written states that nothing was written; it cannot close a "
                "step as succeeded",
            )
    elif outcome.to is StepState.FAILED:
        if outcome.evidence is not None and outcome.evidence.strip():
            checked_evidence(outcome.evidence)
        if may_have_written(step) and not outcome.confirm_not_written:
            raise TransitionRefused(
                R.NOT_WRITTEN_UNCONFIRMED,
                f"the write of {step.operation_ref} may have happened (commit_state "
                f"{step.commit_state or 'not recorded'}); closing it as failed needs an "
                "explicit statement that it did not (confirm_not_written, "
                "--confirm-not-written), after checking the downstream",
            )
