"""The demo's report: per step its path through the states with times, the envelope JSON
the model saw at each stop, the checks, and the article's counts over all steps."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toolsafe.demo.scenarios import Result
from toolsafe.recovery.counts import compute_counts
from toolsafe.recovery.counts import render as render_counts
from toolsafe.recovery.owners import owner_pid
from toolsafe.recovery.store import EventRecord, StepRecord
from toolsafe.tasks.views import build_view, safe_envelope

RULE = "─" * 78


@dataclass(frozen=True)
class Played:
    """One scenario with what the store and the downstream hold about its step."""

    result: Result
    step: StepRecord | None
    events: Sequence[EventRecord]
    effects: int


def _who(owner: object, names: Mapping[int, str]) -> str:
    pid = owner_pid(owner)
    return names.get(pid, f"pid {pid}") if pid is not None else str(owner or "?")


def _describe(event: EventRecord, names: Mapping[int, str]) -> str:
    detail = event.detail
    if event.kind == "claimed":
        what = "execution" if detail.get("claim") == "execute" else "verification"
        extra = f"attempt {detail['attempt']}" if "attempt" in detail else ""
        return f"{what} claimed by {_who(detail.get('owner'), names)} {extra}".rstrip()
    envelope = detail.get("envelope")
    if isinstance(envelope, Mapping) and envelope.get("code"):
        return f"{event.label} [{envelope['code']}]"
    if event.kind == "noop":
        return f"nothing to do: {detail.get('reason', '?')}"
    lookup = detail.get("lookup")
    if isinstance(lookup, Mapping):
        if lookup.get("found"):
            seen = f"found, evidence {lookup.get('evidence_ref', '-')}"
        elif lookup.get("unavailable"):
            seen = f"lookup unavailable: {lookup.get('code', '?')}"
        else:
            seen = "not found"
        return f"{event.label} [{seen}]"
    return event.label


def path_lines(events: Sequence[EventRecord], names: Mapping[int, str]) -> list[str]:
    """The step's path: one line per event, time since submission, states, why."""
    if not events:
        return ["  (no events)"]
    start = events[0].at
    lines = []
    for event in events:
        offset = (event.at - start).total_seconds()
        source = str(event.from_state) if event.from_state else "submitted"
        target = str(event.to_state) if event.to_state else source
        move = f"{source} → {target}" if source != target else f"(stays {target})"
        lines.append(f"  +{offset:6.2f}s  {move:<32} {_describe(event, names)}")
    return lines


def _json(envelope: Mapping[str, Any] | None) -> list[str]:
    body = json.dumps(envelope, indent=2, ensure_ascii=False)
    return [f"    {line}" for line in body.splitlines()]


def envelope_lines(events: Sequence[EventRecord], step: StepRecord | None) -> list[str]:
    """Each envelope the step stopped on, exactly as a view shows it to the model, and
    the view at the end when the last stop came from a lookup, not an execution."""
    lines: list[str] = []
    start = events[0].at if events else None
    shown: dict[str, Any] | None = None
    shown_at: object = None
    for event in events:
        stored = event.detail.get("envelope")
        if event.kind != "executed" or not isinstance(stored, Mapping) or start is None:
            continue
        shown, shown_at = safe_envelope(dict(stored)), event.to_state
        offset = (event.at - start).total_seconds()
        lines.append(f"  stop at {event.to_state} (+{offset:.2f}s):")
        lines.extend(_json(shown))
    if step is not None:
        view = build_view(step)
        final = view.envelope_json()
        if final is not None and final != shown:
            lines.append(f"  at the end, {step.state}:")
            lines.extend(_json(final))
        elif final is not None and step.state != shown_at:
            # Reached by a lookup or an operator, not an execution: no new envelope.
            lines.append(f"  at the end, {step.state}: the view still carries that envelope")
        lines.append(f"  and the text: {view.text}")
    return lines


def scenario_block(index: int, played: Played, names: Mapping[int, str]) -> list[str]:
    result = played.result
    verdict = "as expected" if result.ok else "NOT AS EXPECTED"
    lines = [RULE, f"{index}. {result.title} — {verdict}", RULE]
    tool = played.step.tool if played.step else "?"
    lines.append(
        f"operation_ref {result.operation_ref} · {tool} · downstream effects {played.effects}"
    )
    lines.append("path through the states:")
    lines.extend(path_lines(played.events, names))
    lines.append("what the model saw:")
    lines.extend(envelope_lines(played.events, played.step))
    if result.notes:
        lines.append("notes:")
        lines.extend(f"  - {note}" for note in result.notes)
    lines.append("checks:")
    lines.extend(f"  [{'ok' if c.ok else 'FAIL'}] {c.what}" for c in result.checks)
    if result.error:
        lines.append(f"  [FAIL] {result.error}")
    lines.append("")
    return lines


def as_json(played: Sequence[Played], ok: bool) -> dict[str, Any]:
    """What happened to each scenario's step, from the store and the downstream's own
    count (``toolsafe demo --report``): a test can judge it without the demo's checks."""
    scenarios = []
    for item in played:
        step = item.step
        path: list[str] = []
        for event in item.events:
            if event.to_state is not None and (not path or path[-1] != event.to_state.value):
                path.append(event.to_state.value)
        codes = [
            str(event.detail["envelope"]["code"])
            for event in item.events
            if isinstance(event.detail.get("envelope"), Mapping)
            and "code" in event.detail["envelope"]
        ]
        scenarios.append(
            {
                "name": item.result.name,
                "operation_ref": item.result.operation_ref,
                "state": None if step is None else step.state.value,
                "reason": None if step is None else step.reason,
                "commit_state": None if step is None else step.commit_state,
                "attempts": None if step is None else step.attempts,
                "path": path,
                "codes": codes,
                "effects": item.effects,
                "claimed_by": sorted(
                    {str(e.detail.get("owner")) for e in item.events if e.kind == "claimed"}
                ),
            }
        )
    return {"ok": ok, "scenarios": scenarios}


def render(played: Sequence[Played], names: Mapping[int, str], seconds: float) -> str:
    lines: list[str] = ["", "REPORT", ""]
    for index, item in enumerate(played, 1):
        lines.extend(scenario_block(index, item, names))
    steps = [item.step for item in played if item.step is not None]
    events = [event for item in played for event in item.events]
    lines.extend([RULE, "the article's counts over these steps", RULE])
    lines.append(render_counts(compute_counts(steps, events)))
    worst = max((item.effects for item in played), default=0)
    lines.append(
        f"downstream effects per operation_ref: at most {worst} "
        "(the downstream ran in naive mode: any duplicate write would show here)"
    )
    lines.append("")
    good = sum(1 for item in played if item.result.ok)
    lines.append(f"{good} of {len(played)} scenarios ended as expected in {seconds:.1f}s.")
    return "\n".join(lines)
