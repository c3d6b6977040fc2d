"""The ``toolsafe`` command line.

Exit codes: 0 done, 1 refused or not found (the message says why), 2 bad usage or
settings, 3 the database or broker cannot be reached.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Sequence

from toolsafe.adapters.errors import ToolsafeError
from toolsafe.cli import ops as cli_ops
from toolsafe.recovery.states import RESOLUTION_TARGETS, StepState
from toolsafe.settings import Settings, SettingsError, load_settings, load_settings_or_exit

# A command of its own (``toolsafe serve`` and the like) that runs outside main() calls
# this first: the settings, or one line on stderr and exit code 2.
__all__ = ["EXIT_REFUSED", "EXIT_UNREACHABLE", "EXIT_USAGE", "load_settings_or_exit", "main"]

EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3


def _schema(_: argparse.Namespace) -> int:
    from toolsafe.adapters.envelope import json_schema

    sys.stdout.write(json.dumps(json_schema(), indent=2, sort_keys=True) + "\n")
    return 0


def _worker(args: argparse.Namespace) -> int:
    from toolsafe.celeryconfig import QUEUES
    from toolsafe.worker import default_app

    extra = [item for item in args.celery_args if item != "--"]
    argv = ["worker", "-Q", ",".join(QUEUES), *extra]
    default_app(args.settings).worker_main(argv)
    return 0


def _beat(args: argparse.Namespace) -> int:
    from toolsafe.worker import default_app

    extra = [item for item in args.celery_args if item != "--"]
    default_app(args.settings).start(["beat", *extra])
    return 0


def _migrate(args: argparse.Namespace) -> int:
    from toolsafe.recovery.db import migrate

    migrate(args.settings.database_url)
    sys.stdout.write("schema is up to date\n")
    return 0


def _operator(settings: Settings) -> str:
    return settings.operator or getpass.getuser()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="toolsafe", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    schema = commands.add_parser("schema", help="print the envelope's JSON Schema")
    schema.set_defaults(handler=_schema)

    worker = commands.add_parser(
        "worker",
        help="run a Celery worker on every toolsafe queue (extra args go to celery worker)",
    )
    # Everything toolsafe does not know goes to celery (see main()).
    worker.set_defaults(handler=_worker, passthrough=True)

    beat = commands.add_parser("beat", help="run Celery beat, which schedules the sweeper")
    beat.set_defaults(handler=_beat, passthrough=True)

    migrate = commands.add_parser("migrate", help="create or upgrade the database schema")
    migrate.set_defaults(handler=_migrate)

    submit = commands.add_parser(
        "submit", help="submit a tool call (the input as a JSON object, or @file.json)"
    )
    submit.add_argument("tool", metavar="TOOL")
    submit.add_argument("--input", required=True, metavar="JSON")
    submit.add_argument("--ref", default=None, metavar="OPERATION_REF")
    submit.add_argument("--json", action="store_true")
    submit.set_defaults(handler=cli_ops.submit)

    steps = commands.add_parser("steps", help="list and show steps").add_subparsers(
        dest="steps_command", required=True
    )
    listing = steps.add_parser("list", help="list steps, newest first")
    listing.add_argument("--state", action="append", choices=[state.value for state in StepState])
    listing.add_argument("--limit", type=int, default=100)
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=cli_ops.steps_list)
    show = steps.add_parser("show", help="a step with its envelope and events")
    show.add_argument("ref", metavar="REF")
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=cli_ops.steps_show)

    escalations = commands.add_parser(
        "escalations", help="list, resolve or re-drive escalated steps"
    ).add_subparsers(dest="escalations_command", required=True)
    esc_list = escalations.add_parser("list", help="escalated steps")
    esc_list.add_argument("--limit", type=int, default=100)
    esc_list.add_argument("--json", action="store_true")
    esc_list.set_defaults(handler=cli_ops.escalations_list)
    resolve = escalations.add_parser("resolve", help="close an escalated step")
    resolve.add_argument("ref", metavar="REF")
    resolve.add_argument(
        "--to",
        required=True,
        choices=[state.value for state in StepState if state in RESOLUTION_TARGETS],
    )
    resolve.add_argument("--reason", required=True)
    resolve.add_argument("--operator", default=None)
    resolve.add_argument("--json", action="store_true")
    resolve.set_defaults(handler=cli_ops.escalations_resolve)
    redrive = escalations.add_parser("redrive", help="run an escalated step again")
    redrive.add_argument("ref", metavar="REF")
    redrive.add_argument("--reason", required=True)
    redrive.add_argument("--operator", default=None)
    redrive.add_argument("--json", action="store_true")
    redrive.set_defaults(handler=cli_ops.escalations_redrive)

    for name, handler, help_text in (
        ("approve", cli_ops.approve, "approve a step waiting for approval"),
        ("reject", cli_ops.reject, "reject a step waiting for approval (it fails)"),
    ):
        command = commands.add_parser(name, help=help_text)
        command.add_argument("ref", metavar="REF")
        command.add_argument("--approver", default=None)
        command.add_argument("--reason", required=True)
        command.add_argument("--json", action="store_true")
        command.set_defaults(handler=handler)

    cancel = commands.add_parser("cancel", help="cancel a waiting step")
    cancel.add_argument("ref", metavar="REF")
    cancel.add_argument("--reason", required=True)
    cancel.add_argument("--operator", default=None)
    cancel.add_argument("--json", action="store_true")
    cancel.set_defaults(handler=cli_ops.cancel)

    purge = commands.add_parser(
        "purge",
        help="delete terminal steps older than DURATION, their events and stored inputs",
    )
    purge.add_argument(
        "--older-than", required=True, metavar="DURATION", type=cli_ops.duration,
        help="e.g. 30d, 12h, 1w2d, 90m (last change of the step)",
    )  # fmt: skip
    purge.add_argument("--batch", type=int, default=500, help="steps per transaction")
    purge.add_argument(
        "--include-escalated", action="store_true",
        help="also escalated steps (dead letters no operator closed)",
    )  # fmt: skip
    purge.add_argument("--dry-run", action="store_true", help="count only, delete nothing")
    purge.add_argument("--json", action="store_true")
    purge.set_defaults(handler=cli_ops.purge)

    secrets = commands.add_parser(
        "secrets", help="keys for secret input fields at rest"
    ).add_subparsers(dest="secrets_command", required=True)
    new_key = secrets.add_parser("new-key", help="print a new key for TOOLSAFE_SECRET_KEYS")
    new_key.set_defaults(handler=cli_ops.secrets_new_key)
    rotate = secrets.add_parser(
        "rotate", help="re-encrypt every stored secret input with the first key"
    )
    rotate.add_argument("--batch", type=int, default=500)
    rotate.set_defaults(handler=cli_ops.secrets_rotate)

    from toolsafe.demo import run as demo

    demo.add_parser(commands)

    from toolsafe.chaos import cli as chaos_cli

    chaos_cli.add_commands(commands)

    from toolsafe.conformance import cli as conformance_cli

    conformance_cli.add_parser(commands)

    from toolsafe.metrics import cli as metrics_cli

    metrics_cli.add_parser(commands)

    from toolsafe.gateway import cli as gateway_cli

    gateway_cli.add_commands(commands)
    return parser


def _fail(code: int, message: str) -> int:
    sys.stderr.write(f"toolsafe: error: {message}\n")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "passthrough", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.celery_args = extra
    try:
        # Every command checks every setting first: a bad value stops it before it does
        # anything (exit code 2), whether or not the command would have used it.
        args.settings = load_settings()
    except SettingsError as error:
        return _fail(EXIT_USAGE, str(error))
    for actor in ("operator", "approver"):
        if hasattr(args, actor) and getattr(args, actor) is None:
            setattr(args, actor, _operator(args.settings))
    from sqlalchemy.exc import OperationalError

    try:
        code: int = args.handler(args)
    except SettingsError as error:
        return _fail(EXIT_USAGE, str(error))
    except ToolsafeError as error:
        return _fail(EXIT_REFUSED, str(error))
    except OperationalError as error:
        # The driver's message names host and port, not the password.
        return _fail(EXIT_UNREACHABLE, f"the database cannot be reached: {error.orig}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
