"""The status page's queries (``toolsafe.recovery.store.sql.overview``) on PostgreSQL and
SQLite: capped counts, filters, and keyset pages that neither skip nor repeat a step."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import insert

from toolsafe.recovery.records import StepRecord
from toolsafe.recovery.schema import steps
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.overview import SPARSE, Count, StepFilter
from toolsafe.recovery.store.sql import StepStore
from toolsafe.recovery.store.sql.overview import Overview

S = StepState
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _load(store: StepStore, rows: list[tuple[str, str, StepState]]) -> None:
    values: list[dict[str, Any]] = [
        {
            "operation_ref": ref,
            "tool": tool,
            "input": {},
            "input_hash": "h",
            "state": state.value,
            "max_attempts": 3,
            "flagged_fields": [],
            "created_at": NOW,
            "updated_at": NOW,
        }
        for ref, tool, state in rows
    ]
    with store.engine.begin() as conn:
        conn.execute(insert(steps), values)


def _refs(found: list[StepRecord]) -> list[str]:
    return [step.operation_ref for step in found]


def test_counts_are_per_state_and_capped(store: StepStore) -> None:
    _load(store, [(f"c/{n}", "t", S.SUCCEEDED) for n in range(7)] + [("c/x", "t", S.FAILED)])
    counts = Overview(store.engine).counts(StepFilter(), cap=5)
    assert counts[S.SUCCEEDED] == Count(5, capped=True) and str(counts[S.SUCCEEDED]) == "5+"
    assert counts[S.FAILED] == Count(1, capped=False) and str(counts[S.FAILED]) == "1"
    assert counts[S.PENDING] == Count(0, capped=False)
    assert set(counts) == set(StepState)


@pytest.mark.parametrize("dense", [False, True], ids=["few per state", "many per state"])
def test_keyset_pages_cover_a_group_once_newest_first(store: StepStore, dense: bool) -> None:
    _load(
        store,
        [(f"p/{n:02d}", "t", S.SUCCEEDED if n % 3 else S.FAILED) for n in range(23)]
        + [("p/other", "t", S.PENDING)],
    )
    overview = Overview(store.engine)
    terminal = StepFilter(states=frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED}))
    # Counts above SPARSE take the path that reads each state's newest ids in order.
    sizes = {state: Count(SPARSE, capped=True) for state in StepState} if dense else None
    seen: list[StepRecord] = []
    cursor: int | None = None
    for _ in range(5):
        found, cursor = overview.page(terminal, before=cursor, limit=10, sizes=sizes)
        seen.extend(found)
        if cursor is None:
            break
    assert [len(seen), cursor] == [23, None]
    ids = [step.id for step in seen]
    assert ids == sorted(ids, reverse=True)
    assert _refs(seen) == [f"p/{n:02d}" for n in reversed(range(23))]


def test_a_full_last_page_has_no_next(store: StepStore) -> None:
    _load(store, [(f"f/{n}", "t", S.ESCALATED) for n in range(10)])
    found, cursor = Overview(store.engine).page(
        StepFilter(states=frozenset({S.ESCALATED})), limit=10
    )
    assert (len(found), cursor) == (10, None)


def test_the_prefix_is_literal_and_the_tool_exact(store: StepStore) -> None:
    _load(
        store,
        [
            ("run_1/a", "create_invoice", S.NEEDS_INPUT),
            ("run_1/b", "send_email", S.NEEDS_INPUT),
            ("runx1/c", "create_invoice", S.NEEDS_INPUT),  # `_` is no wildcard
            ("RUN_1/d", "create_invoice", S.NEEDS_INPUT),  # nor is the case ignored
            ("run_10/e", "create_invoice", S.NEEDS_INPUT),
        ],
    )
    overview = Overview(store.engine)
    waiting = frozenset({S.NEEDS_INPUT})
    found, _ = overview.page(StepFilter(prefix="run_1/", states=waiting))
    assert _refs(found) == ["run_1/b", "run_1/a"]
    assert overview.counts(StepFilter(prefix="run_1"))[S.NEEDS_INPUT] == Count(3, False)
    found, _ = overview.page(StepFilter(tool="create_invoice", prefix="run_1", states=waiting))
    assert _refs(found) == ["run_10/e", "run_1/a"]
    assert overview.counts(StepFilter(tool="send_email"))[S.NEEDS_INPUT] == Count(1, False)
    found, cursor = overview.page(StepFilter(prefix="nothing/", states=waiting))
    assert (found, cursor) == ([], None)
