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
from typing import TYPE_CHECKING, Any

from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import StepRecord, StorePort
from toolsafe.tasks.views import StepView, build_view

if TYPE_CHECKING:
    from toolsafe.recovery.store import StepStore
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


def steps_list(args: argparse.Namespace) -> int:
    states = [StepState(value) for value in args.state] if args.state else None
    steps = _store().list_steps(states, args.limit)
    if args.json:
        _print_json([build_view(step).as_dict() for step in steps])
    else:
        _table(steps)
    return 0


def _show(view: StepView) -> None:
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
        "envelope",
    ]
    envelope = json.dumps(view.envelope, indent=2, sort_keys=True) if view.envelope else "-"
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


def steps_show(args: argparse.Namespace) -> int:
    view = _client().view(args.ref)
    if args.json:
        _print_json(view.as_dict())
    else:
        _show(view)
    return 0


def escalations_list(args: argparse.Namespace) -> int:
    steps = _store().list_steps([StepState.ESCALATED], args.limit)
    if args.json:
        _print_json([build_view(step).as_dict() for step in steps])
    else:
        _table(steps)
    return 0


def _done(view: StepView, args: argparse.Namespace) -> int:
    if getattr(args, "json", False):
        _print_json(view.as_dict())
    else:
        sys.stdout.write(f"{view.operation_ref}: {view.state} ({view.ui_group})\n")
    return 0


def escalations_resolve(args: argparse.Namespace) -> int:
    view = _client().resolve(
        args.ref,
        args.to,
        args.operator,
        args.reason,
        evidence=args.evidence,
        confirm_not_written=args.confirm_not_written,
    )
    return _done(view, args)


def escalations_redrive(args: argparse.Namespace) -> int:
    return _done(_client().redrive(args.ref, args.operator, args.reason), args)


def approve(args: argparse.Namespace) -> int:
    return _done(_client().approve(args.ref, args.approver, args.reason), args)


def reject(args: argparse.Namespace) -> int:
    return _done(_client().reject(args.ref, args.approver, args.reason), args)


def _input_argument(raw: str) -> Any:
    """``--input``: JSON text, or ``@path`` to read it from a file."""
    from toolsafe.settings import SettingsError

    text = raw
    if raw.startswith("@"):
        with open(raw[1:], encoding="utf-8") as handle:
            text = handle.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        # A usage error (exit 2), naming where the JSON breaks, not echoing it.
        raise SettingsError(
            "--input", f"is not JSON: {error.msg} at character {error.pos}"
        ) from None


def submit(args: argparse.Namespace) -> int:
    """Commit the step and publish it; the input's problems come back as InvalidInput."""
    view = _client().submit(args.tool, _input_argument(args.input), operation_ref=args.ref)
    return _done(view, args)


def cancel(args: argparse.Namespace) -> int:
    return _done(_client().cancel(args.ref, args.reason, by=args.operator), args)


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


def _sql_store(client: Client) -> StepStore:
    """The database behind the operator's client (retention works on its tables)."""
    from toolsafe.recovery.store import StepStore

    store = client.runtime.store
    if not isinstance(store, StepStore):
        raise TypeError("purge and key rotation need the database store")
    return store


def purge(args: argparse.Namespace) -> int:
    from toolsafe.recovery.states import StepState as S
    from toolsafe.recovery.store.retention import PURGEABLE
    from toolsafe.recovery.store.retention import purge as purge_steps
    from toolsafe.tasks.runtime import utcnow

    states = set(PURGEABLE) | ({S.ESCALATED} if args.include_escalated else set())
    cutoff = utcnow() - args.older_than
    report = purge_steps(
        _sql_store(_client()), cutoff, states=states, batch=args.batch, dry_run=args.dry_run
    )
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
    from toolsafe.recovery.store.retention import reseal_inputs
    from toolsafe.settings import SettingsError

    runtime = _client().runtime
    if runtime.secret_box is None:
        raise SettingsError("TOOLSAFE_SECRET_KEYS", "names no key to rotate to")
    count = reseal_inputs(_sql_store(_client()), runtime.secret_box.rotate, batch=args.batch)
    sys.stdout.write(f"re-encrypted the secret inputs of {count} steps with the first key\n")
    return 0
