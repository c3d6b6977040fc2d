"""One vocabulary in several places: the StrEnum, the transition table and the diagram
and tables in ``docs/lifecycle.md`` must agree."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from toolsafe.recovery import reasons
from toolsafe.recovery.states import (
    ALLOWED,
    LABELS,
    TERMINAL,
    TRANSITIONS,
    WAITING,
    WORK_STATES,
    StepState,
    is_allowed,
    label_of,
    ui_group,
)

S = StepState
DOC = Path(__file__).resolve().parents[3] / "docs" / "lifecycle.md"
EDGE = re.compile(r"^\s*(\w+)\s*-->\s*(\w+)\s*:\s*(.+?)\s*$")


def doc_text() -> str:
    return DOC.read_text(encoding="utf-8")


def mermaid_edges() -> list[tuple[str, str, str]]:
    blocks = re.findall(r"```mermaid\n(.*?)```", doc_text(), flags=re.DOTALL)
    assert len(blocks) == 1, "docs/lifecycle.md must hold exactly one mermaid diagram"
    lines = blocks[0].splitlines()
    assert lines[0].strip() == "stateDiagram-v2"
    edges = []
    for line in lines[1:]:
        if not line.strip() or "[*]" in line:  # the start marker is not a state
            continue
        match = EDGE.match(line)
        assert match, f"not a labelled edge: {line!r}"
        edges.append((match[1], match[2], match[3]))
    return edges


def doc_table(heading: str) -> dict[str, str]:
    """The first two columns of the markdown table under ``heading``."""
    section = doc_text().split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| (.+?) \|$", section, flags=re.MULTILINE)
    return dict(rows)


def test_states_are_lower_snake_case_and_unique() -> None:
    values = [state.value for state in S]
    assert len(set(values)) == len(values) == 10
    assert all(re.fullmatch(r"[a-z]+(_[a-z]+)*", value) for value in values)
    assert all(str(state) == state.value for state in S)


def test_every_edge_of_the_doc_is_in_the_table_and_back() -> None:
    edges = mermaid_edges()
    assert len(edges) == len(set(edges)), "an edge is drawn twice"
    assert set(edges) == {(str(a), str(b), label) for a, b, label in TRANSITIONS}


def test_every_state_is_drawn() -> None:
    drawn = {state for edge in mermaid_edges() for state in edge[:2]}
    assert drawn == {state.value for state in S}


def test_each_pair_of_states_has_one_label() -> None:
    pairs = Counter((src, dst) for src, dst, _ in TRANSITIONS)
    assert all(count == 1 for count in pairs.values())
    assert set(LABELS) == ALLOWED
    assert label_of(S.ESCALATED, S.VERIFYING).endswith("verify first")
    with pytest.raises(KeyError):
        label_of(S.SUCCEEDED, S.PENDING)


def test_terminal_states_have_no_way_out_except_operator_resolution() -> None:
    for src, dst in ALLOWED:
        if src in TERMINAL:
            assert src is S.ESCALATED, f"{src} -> {dst} leaves a terminal state"
    assert {dst for src, dst in ALLOWED if src is S.ESCALATED} == {
        S.PENDING,
        S.VERIFYING,
        S.SUCCEEDED,
        S.FAILED,
    }


def test_waiting_states_are_exactly_the_cancellable_ones() -> None:
    assert {src for src, dst in ALLOWED if dst is S.CANCELLED} == WAITING
    assert not WAITING & TERMINAL
    assert S.IN_FLIGHT not in WAITING
    assert WORK_STATES <= WAITING


def test_only_claims_lead_into_in_flight() -> None:
    assert {src for src, dst in ALLOWED if dst is S.IN_FLIGHT} == {S.PENDING, S.WAITING_RETRY}
    assert not is_allowed(S.VERIFYING, S.IN_FLIGHT)  # R4: never straight back to execution
    assert not is_allowed(S.ESCALATED, S.IN_FLIGHT)


def test_every_non_terminal_state_has_a_way_forward() -> None:
    for state in set(S) - TERMINAL:
        assert any(src is state and dst is not state for src, dst in ALLOWED), state


def test_ui_groups_tell_the_waiting_states_apart() -> None:
    groups = {state: ui_group(state) for state in S}
    waiting_groups = {groups[state] for state in WAITING - {S.PENDING}}
    assert waiting_groups == {
        "waiting to retry",
        "verifying the result",
        "waiting for input",
        "waiting for approval",
    }
    assert {groups[state] for state in TERMINAL} == {"terminal"}
    # Success shows only once confirmed: nothing before `succeeded` looks terminal.
    assert all(groups[state] != "terminal" for state in set(S) - TERMINAL)


def test_ui_groups_in_the_doc_match_the_code() -> None:
    assert doc_table("What a front end shows") == {state.value: ui_group(state) for state in S}


def test_every_reason_code_is_documented() -> None:
    documented = doc_table("Escalation and failure reasons")
    assert set(documented) == set(reasons.REASONS)


def test_every_refusal_code_is_documented() -> None:
    documented = doc_table("Refused actions")
    assert set(documented) == set(reasons.REFUSALS)
