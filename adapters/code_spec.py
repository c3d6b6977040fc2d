"""One entry of the code catalogue (``codes.CATALOGUE``): a code's default
classification, the detail keys it may carry and its message templates; and the
sentences several codes' templates share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from toolsafe.adapters.envelope import Category, CommitState, Directive, NextAction

__all__ = ["FIX", "HANDED_OVER", "WAIT", "CodeSpec", "spec"]


@dataclass(frozen=True)
class CodeSpec:
    """One code: its default classification, allowed detail keys and message templates.

    Templates are ``str.format`` strings that may name only ``allowed_keys``; a key that
    was not supplied renders as ``unspecified``.
    """

    code: str
    category: Category
    commit_state: CommitState
    directive: Directive
    next_action: NextAction
    max_attempts_remaining: int
    allowed_keys: frozenset[str]
    agent_template: str
    user_template: str
    meaning: str


def spec(
    code: str,
    category: Category,
    commit_state: CommitState,
    directive: Directive,
    next_action: NextAction,
    attempts: int,
    keys: tuple[str, ...],
    agent: str,
    user: str,
    meaning: str,
) -> CodeSpec:
    return CodeSpec(
        code, category, commit_state, directive, next_action, attempts, frozenset(keys),
        agent, user, meaning,
    )  # fmt: skip


HANDED_OVER: Final = "It was handed to an operator; do not retry it."
FIX: Final = "Correct the flagged input and submit it again under the same operation_ref."
WAIT: Final = "Nothing was written; the scheduler retries after not_before. Do not retry yourself."
