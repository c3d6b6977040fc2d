"""Operator commands of the ``toolsafe`` CLI: steps, escalations, approvals.

Each handler prints plain text (or JSON with ``--json``) and returns the exit code.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

from toolsafe.adapters.json_input import JsonInputError, read_json
from toolsafe.cli.acting import act
from toolsafe.cli.exits import EXIT_REFUSED
from toolsafe.recovery.states import REDRIVEN, StepState, ui_group
from toolsafe.recovery.store import StepRecord, StorePort
from toolsafe.tasks.repeats import Action
from toolsafe.tasks.views import StepView, build_view, redacted_input

if TYPE_CHECKING:
    from toolsafe.tasks.client import Client


def _client() -> Client:
    from toolsafe.tasks.client import Client

    return Client()


def _store() -> StorePort:
    return _client().runtime.store


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def _table(steps: Sequence[StepRecord]) -> None:
    header = f"{'operation_ref':<40} {'tool':<18} {'state':<18} {'att':>5}  {'reason':<22} due_at"
    sys.stdout.write(header + "\n")
    for step in steps:
        due = step.due_at.isoformat(timespec="seconds") if step.due_at else "-"
        attempts = f"{step.attempts}/{step.max_attempts}"
        sys.stdout.write(
            f"{step.operation_ref:<40} {step.tool:<18} {step.state!s:<18} {attempts:>5}  "
            f"{step.reason or '-':<22} {due}\n"
        )


def group_states(group: str) -> list[StepState]:
    """The states a front end shows in ``group`` (``toolsafe.recovery.states.ui_group``)."""
    return [state for state in StepState if ui_group(state) == group]


GROUPS: Final = tuple(dict.fromkeys(ui_group(state) for state in StepState))


def _wanted_states(args: argparse.Namespace) -> list[StepState] | None:
    """``--state`` and ``--group`` together: the states in both (each may repeat)."""
    states: set[StepState] | None = None
    if args.state:
        states = {StepState(value) for value in args.state}
    if args.group:
        grouped = {state for group in args.group for state in group_states(group)}
        states = grouped if states is None else states & grouped
    return None if states is None else sorted(states, key=list(StepState).index)


def steps_list(args: argparse.Namespace) -> int:
    states = _wanted_states(args)
    if states == []:
        steps: list[StepRecord] = []  # --state and --group that share no state
    else:
        steps = _store().list_steps(states, args.limit, tool=args.tool, prefix=args.ref_prefix)
    if args.json:
        _print_json([build_view(step).as_dict() for step in steps])
    else:
        _table(steps)
        if not steps and args.ref_prefix:
            _hint_namespaces(args.ref_prefix)
    return 0


def _hint_namespaces(prefix: str) -> None:
    """For a prefix no step has: the key namespaces in which it finds steps (stderr)."""
    backend = _client().runtime.backend
    if not backend.has("keys"):
        return
    store = backend.steps
    keys = backend.keys.list()
    found = [
        f"{namespace}/{prefix}"
        for namespace in sorted({key.namespace for key in keys if key.namespace})
        if store.list_steps(None, 1, prefix=f"{namespace}/{prefix}")
    ]
    if found:
        sys.stderr.write(
            f"no step starts with {prefix!r}; keys with a namespace put it in front of their "
            f"refs: try --ref-prefix {' or '.join(found)}\n"
        )


def _show(view: StepView, stored_input: dict[str, Any]) -> None:
    lines = [
        f"operation_ref  {view.operation_ref}",
        f"tool           {view.tool}",
        f"state          {view.state} ({view.ui_group})",
        f"commit_state   {view.commit_state or '-'}",
        f"attempts       {view.attempts}/{view.max_attempts}",
        f"due_at         {view.due_at.isoformat() if view.due_at else '-'}",
        f"reason         {view.reason or '-'}",
        f"fields         {', '.join(view.fields) or '-'}",
        f"text           {view.text}",
        "input (redacted)",
    ]
    shown_input = json.dumps(stored_input, indent=2, sort_keys=True)
    lines.extend("  " + line for line in shown_input.splitlines())
    lines.append("envelope")
    envelope = json.dumps(view.envelope_json(), indent=2, sort_keys=True) if view.envelope else "-"
    lines.extend("  " + line for line in envelope.splitlines())
    lines.append("events")
    for entry in view.history:
        move = f"{entry.from_state or '-'} → {entry.to_state or '-'}"
        detail = " ".join(f"{key}={value}" for key, value in sorted(entry.detail.items()))
        lines.append(
            f"  {entry.at.isoformat(timespec='milliseconds')}  {entry.kind:<14} {move:<32} "
            f"{entry.label}  {detail}".rstrip()
        )
    sys.stdout.write("\n".join(lines) + "\n")


def namespaced(client: Client, ref: str) -> list[str]:
    """The refs ``<namespace>/<ref>`` that exist, one per key namespace: a key with a
    namespace puts it in front of every ref it submits (docs/gateway.md)."""
    from toolsafe.recovery.store import StepNotFound

    backend = client.runtime.backend
    if not backend.has("keys"):
        return []
    store = backend.steps
    found = []
    for namespace in sorted({key.namespace for key in backend.keys.list() if key.namespace}):
        candidate = f"{namespace}/{ref}"
        try:
            store.get(candidate)
        except StepNotFound:
            continue
        found.append(candidate)
    return found


def steps_show(args: argparse.Namespace) -> int:
    from toolsafe.recovery.store import StepNotFound

    client = _client()
    try:
        view = client.view(args.ref)
    except StepNotFound:
        candidates = namespaced(client, args.ref)
        if not candidates:
            raise
        sys.stderr.write(
            f"toolsafe: error: no step {args.ref!r}; keys with a namespace put it in front of "
            f"their refs: try {' or '.join(repr(ref) for ref in candidates)}\n"
        )
        return EXIT_REFUSED
    shown_input = redacted_input(client.runtime.store.get(args.ref).input)
    if args.json:
        _print_json({**view.as_dict(), "input": shown_input})
    else:
        _show(view, shown_input)
    return 0


def escalations_list(args: argparse.Namespace) -> int:
    steps = _store().list_steps([StepState.ESCALATED], args.limit)
    if args.json:
        _print_json([build_view(step).as_dict() for step in steps])
    else:
        _table(steps)
    return 0


def escalations_resolve(args: argparse.Namespace) -> int:
    target = StepState(args.to)
    return act(
        args,
        Action("resolved", f"resolved as {target}", frozenset({target})),
        lambda client: client.resolve(
            args.ref,
            target,
            args.operator,
            args.reason,
            evidence=args.evidence,
            confirm_not_written=args.confirm_not_written,
        ),
    )


def escalations_redrive(args: argparse.Namespace) -> int:
    return act(
        args,
        Action("resolved", "re-driven", REDRIVEN),
        lambda client: client.redrive(args.ref, args.operator, args.reason),
    )


def approve(args: argparse.Namespace) -> int:
    return act(
        args,
        Action("approved", "approved"),
        lambda client: client.approve(args.ref, args.approver, args.reason),
    )


def reject(args: argparse.Namespace) -> int:
    return act(
        args,
        Action("rejected", "rejected"),
        lambda client: client.reject(args.ref, args.approver, args.reason),
    )


def _input_argument(raw: str) -> Any:
    """``--input``: JSON text, or ``@path`` to read it from a file."""
    from toolsafe.settings import SettingsError

    text = raw
    if raw.startswith("@"):
        try:
            with open(raw[1:], encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError) as error:
            reason = error.strerror if isinstance(error, OSError) else "it is not UTF-8 text"
            raise SettingsError("--input", f"cannot read {raw[1:]!r}: {reason}") from None
    try:
        return read_json(text)
    except JsonInputError as error:
        # A usage error (exit 2), naming what is wrong and where, never echoing it; too
        # deep is refused here, before a recursive parser could fail on it.
        raise SettingsError("--input", f"is not JSON toolsafe can read: {error}") from None


def submit(args: argparse.Namespace) -> int:
    """Commit the step and publish it; the input's problems come back as InvalidInput."""
    given = _input_argument(args.input)
    return act(
        args,
        Action("submitted", "submitted"),
        lambda client: client.submit(args.tool, given, operation_ref=args.ref),
    )


def cancel(args: argparse.Namespace) -> int:
    return act(
        args,
        Action("cancelled", "cancelled"),
        lambda client: client.cancel(args.ref, args.reason, by=args.operator),
    )


_DURATION_PART = re.compile(r"(\d+)([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def duration(text: str) -> timedelta:
    """``30d``, ``12h``, ``1w2d``, ``90m``, ``45s``: an argparse type."""
    compact = text.strip().lower()
    parts = _DURATION_PART.findall(compact)
    if not compact or "".join(f"{n}{u}" for n, u in parts) != compact:
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r} is not a duration like 30d, 12h, 1w2d, 90m or 45s"
        )
    total = timedelta()
    for number, unit in parts:
        total += timedelta(**{_UNITS[unit]: int(number)})
    if total <= timedelta(0):
        raise argparse.ArgumentTypeError("the duration must be longer than 0")
    return total


def purge(args: argparse.Namespace) -> int:
    from toolsafe.recovery.states import StepState as S
    from toolsafe.recovery.store.retention import PURGEABLE
    from toolsafe.tasks.runtime import utcnow

    states = set(PURGEABLE) | ({S.ESCALATED} if args.include_escalated else set())
    cutoff = utcnow() - args.older_than
    # A store without retention refuses here, naming itself and the feature.
    retention = _client().runtime.backend.retention
    report = retention.purge(cutoff, states=states, batch=args.batch, dry_run=args.dry_run)
    if args.json:
        _print_json({**vars(report), "before": cutoff.isoformat()})
        return 0
    verb = "would remove" if report.dry_run else "removed"
    shown = ", ".join(f"{state} {count}" for state, count in sorted(report.by_state.items()))
    sys.stdout.write(
        f"{verb} {report.steps} terminal steps last changed before "
        f"{cutoff.isoformat(timespec='seconds')} ({shown or 'none'}), {report.events} events "
        f"and their stored inputs, in {report.batches} batches\n"
    )
    return 0


def secrets_new_key(args: argparse.Namespace) -> int:
    from toolsafe.recovery.secrets import new_key

    sys.stdout.write(new_key() + "\n")
    return 0


def secrets_rotate(args: argparse.Namespace) -> int:
    from toolsafe.settings import SettingsError

    runtime = _client().runtime
    if runtime.secret_box is None:
        raise SettingsError("TOOLSAFE_SECRET_KEYS", "names no key to rotate to")
    count = runtime.backend.retention.reseal_inputs(runtime.secret_box.rotate, batch=args.batch)
    sys.stdout.write(f"re-encrypted the secret inputs of {count} steps with the first key\n")
    return 0
