"""The ``toolsafe`` command line.

Exit codes: 0 done (or already done), 1 refused or not found (the message says why),
2 bad usage or settings, 3 the database or broker cannot be reached (after an operator
action: it was committed, and the sweeper publishes its hint when the broker returns).
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Callable, Sequence

from toolsafe.adapters.errors import ToolsafeError
from toolsafe.cli import ops as cli_ops
from toolsafe.cli.exits import EXIT_INTERRUPTED, EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_USAGE
from toolsafe.recovery.states import RESOLUTION_TARGETS, StepState
from toolsafe.settings import Settings, SettingsError, load_settings, load_settings_or_exit

# A command of its own (``toolsafe serve`` and the like) that runs outside main() calls
# this first: the settings, or one line on stderr and exit code 2.
__all__ = ["EXIT_REFUSED", "EXIT_UNREACHABLE", "EXIT_USAGE", "load_settings_or_exit", "main"]

MAX_LIMIT = 10_000


def bounded(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer from ``low`` to ``high``, or a usage error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not between {low} and {high}")
        return value

    parse.__name__ = "number"  # argparse names the type in its messages
    return parse


def _schema(_: argparse.Namespace) -> int:
    from toolsafe.adapters.envelope import json_schema

    sys.stdout.write(json.dumps(json_schema(), indent=2, sort_keys=True) + "\n")
    return 0


def _celery(args: argparse.Namespace, argv: list[str]) -> int:
    """``celery <argv>`` on toolsafe's app, with Celery's own exit code: non-zero after
    an unrecoverable error (a supervisor restarts on it), 0 after a warm shutdown."""
    import click
    from celery.bin.celery import celery

    from toolsafe.worker import default_app

    command = argv[0]
    celery.params[0].default = default_app(args.settings)
    try:
        code = celery.main(args=argv, standalone_mode=False)
    except click.ClickException as error:
        error.show()
        return error.exit_code
    except click.exceptions.Abort:
        return EXIT_INTERRUPTED
    finally:
        celery.params[0].default = None
    code = code if isinstance(code, int) else 0
    if code:
        sys.stderr.write(
            f"toolsafe {command}: stopped with exit code {code} after an unrecoverable "
            "error (the log above says which); a supervisor should restart it\n"
        )
        sys.stderr.flush()
    return code


def _worker(args: argparse.Namespace) -> int:
    from toolsafe.celeryconfig import QUEUES

    extra = [item for item in args.celery_args if item != "--"]
    return _celery(args, ["worker", "-Q", ",".join(QUEUES), *extra])


def _beat(args: argparse.Namespace) -> int:
    extra = [item for item in args.celery_args if item != "--"]
    return _celery(args, ["beat", *extra])


def _migrate(args: argparse.Namespace) -> int:
    from toolsafe.recovery.db import migrate_and_report

    created = migrate_and_report(args.settings.store.url)
    if created:
        sys.stdout.write(
            f"created {len(created)} tables: {', '.join(created)}; schema is up to date\n"
        )
    else:
        sys.stdout.write("schema is up to date (no table created)\n")
    return 0


def _operator(settings: Settings) -> str:
    return settings.operator or getpass.getuser()


def _ref(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ref", metavar="REF", help="the step's operation_ref")


def _json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def _reason(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--reason", required=True, help=f"why you {what} (recorded)")


def _actor(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument(
        f"--{name}", default=None,
        help="the name recorded with the action (default: TOOLSAFE_OPERATOR, else the OS user)",
    )  # fmt: skip


def _limit(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--limit", type=bounded(1, MAX_LIMIT), default=100,
        help=f"show at most this many, newest first (1 to {MAX_LIMIT}; default 100)",
    )  # fmt: skip


class _Version(argparse.Action):
    """``--version``: argparse's own action, with the version read only when asked for
    (reading it scans the installed distributions: every command would pay for it)."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        from toolsafe import __version__

        sys.stdout.write(f"toolsafe {__version__}\n")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="toolsafe", description=__doc__)
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    commands = parser.add_subparsers(dest="command", required=True)

    schema = commands.add_parser("schema", help="print the envelope's JSON Schema")
    schema.set_defaults(handler=_schema)

    worker = commands.add_parser(
        "worker",
        help="run a Celery worker on every toolsafe queue (extra args go to celery worker)",
        description="Run a Celery worker on every toolsafe queue. Every option toolsafe "
        "does not know passes through to `celery worker` (e.g. toolsafe worker -- -c 4 "
        "-P prefork -l INFO; see `celery worker --help`). Exit status: 0 after a warm "
        "shutdown, non-zero after an unrecoverable error.",
    )
    # Everything toolsafe does not know goes to celery (see main()).
    worker.set_defaults(handler=_worker, passthrough=True)

    beat = commands.add_parser(
        "beat",
        help="run Celery beat, which schedules the sweeper (extra args go to celery beat)",
        description="Run Celery beat, which schedules the sweeper. Every option toolsafe "
        "does not know passes through to `celery beat` (e.g. toolsafe beat -- -s FILE). "
        "Exit status: 0 after a warm shutdown, non-zero after an unrecoverable error.",
    )
    beat.set_defaults(handler=_beat, passthrough=True)

    migrate = commands.add_parser("migrate", help="create or upgrade the database schema")
    migrate.set_defaults(handler=_migrate)

    submit = commands.add_parser(
        "submit", help="submit a tool call (the input as a JSON object, or @file.json)"
    )
    submit.add_argument("tool", metavar="TOOL", help="the registered tool's name")
    submit.add_argument(
        "--input", required=True, metavar="JSON",
        help="the tool's input: a JSON object, or @FILE to read it from a file",
    )  # fmt: skip
    submit.add_argument(
        "--ref", default=None, metavar="OPERATION_REF",
        help="the step's operation_ref (default: a new one); the same ref again returns "
        "the same step",
    )  # fmt: skip
    _json(submit)
    submit.set_defaults(handler=cli_ops.submit)

    steps = commands.add_parser("steps", help="list and show steps").add_subparsers(
        dest="steps_command", required=True
    )
    listing = steps.add_parser("list", help="list steps, newest first")
    listing.add_argument(
        "--state", action="append", choices=[state.value for state in StepState],
        help="only steps in this state (repeat for several)",
    )  # fmt: skip
    listing.add_argument(
        "--group", action="append", choices=cli_ops.GROUPS, metavar="GROUP",
        help="only steps in this state group (repeat for several): "
        + ", ".join(repr(group) for group in cli_ops.GROUPS),
    )  # fmt: skip
    listing.add_argument("--tool", default=None, help="only steps of this tool")
    listing.add_argument(
        "--ref-prefix", default=None, metavar="PREFIX",
        help="only steps whose operation_ref starts with PREFIX (e.g. run_81/)",
    )  # fmt: skip
    _limit(listing)
    _json(listing)
    listing.set_defaults(handler=cli_ops.steps_list)
    show = steps.add_parser("show", help="a step: its redacted input, envelope and events")
    _ref(show)
    _json(show)
    show.set_defaults(handler=cli_ops.steps_show)

    escalations = commands.add_parser(
        "escalations", help="list, resolve or re-drive escalated steps"
    ).add_subparsers(dest="escalations_command", required=True)
    esc_list = escalations.add_parser("list", help="escalated steps")
    _limit(esc_list)
    _json(esc_list)
    esc_list.set_defaults(handler=cli_ops.escalations_list)
    resolve = escalations.add_parser(
        "resolve", help="close an escalated step as succeeded (with evidence) or failed"
    )
    _ref(resolve)
    resolve.add_argument(
        "--to",
        required=True,
        choices=[state.value for state in StepState if state in RESOLUTION_TARGETS],
        help="the state it closes in",
    )
    _reason(resolve, "close it")
    resolve.add_argument(
        "--evidence", default=None, metavar="REFERENCE",
        help="the downstream reference you checked (an invoice id, a URL); required with "
        "--to succeeded",
    )  # fmt: skip
    resolve.add_argument(
        "--confirm-not-written", action="store_true",
        help="state that a write which may have happened did not (checked downstream); "
        "required with --to failed when the outcome is unknown",
    )  # fmt: skip
    _actor(resolve, "operator")
    _json(resolve)
    resolve.set_defaults(handler=cli_ops.escalations_resolve)
    redrive = escalations.add_parser(
        "redrive", help="run an escalated step again (verified first if its outcome is unknown)"
    )
    _ref(redrive)
    _reason(redrive, "run it again")
    _actor(redrive, "operator")
    _json(redrive)
    redrive.set_defaults(handler=cli_ops.escalations_redrive)

    for name, handler, help_text, what in (
        ("approve", cli_ops.approve, "approve a step waiting for approval", "approve it"),
        ("reject", cli_ops.reject, "reject a step waiting for approval (it fails)", "reject it"),
    ):
        command = commands.add_parser(name, help=help_text)
        _ref(command)
        _actor(command, "approver")
        _reason(command, what)
        _json(command)
        command.set_defaults(handler=handler)

    cancel = commands.add_parser("cancel", help="cancel a waiting step")
    _ref(cancel)
    _reason(cancel, "cancel it")
    _actor(cancel, "operator")
    _json(cancel)
    cancel.set_defaults(handler=cli_ops.cancel)

    purge = commands.add_parser(
        "purge",
        help="delete terminal steps older than DURATION, their events and stored inputs",
    )
    purge.add_argument(
        "--older-than", required=True, metavar="DURATION", type=cli_ops.duration,
        help="e.g. 30d, 12h, 1w2d, 90m (last change of the step)",
    )  # fmt: skip
    purge.add_argument(
        "--batch", type=bounded(1, MAX_LIMIT), default=500, help="steps per transaction"
    )
    purge.add_argument(
        "--include-escalated", action="store_true",
        help="also escalated steps (dead letters no operator closed)",
    )  # fmt: skip
    purge.add_argument("--dry-run", action="store_true", help="count only, delete nothing")
    _json(purge)
    purge.set_defaults(handler=cli_ops.purge)

    secrets = commands.add_parser(
        "secrets", help="keys for secret input fields at rest"
    ).add_subparsers(dest="secrets_command", required=True)
    new_key = secrets.add_parser("new-key", help="print a new key for TOOLSAFE_SECRET_KEYS")
    new_key.set_defaults(handler=cli_ops.secrets_new_key)
    rotate = secrets.add_parser(
        "rotate", help="re-encrypt every stored secret input with the first key"
    )
    rotate.add_argument(
        "--batch", type=bounded(1, MAX_LIMIT), default=500, help="steps per transaction"
    )
    rotate.set_defaults(handler=cli_ops.secrets_rotate)

    from toolsafe.demo import run as demo

    demo.add_parser(commands)

    from toolsafe.cli import workers as workers_cli

    workers_cli.add_parser(commands)

    from toolsafe.up import run as up

    up.add_parser(commands)

    from toolsafe.chaos import cli as chaos_cli

    chaos_cli.add_parser(commands)

    from toolsafe.conformance import cli as conformance_cli

    conformance_cli.add_parser(commands)

    from toolsafe.metrics import cli as metrics_cli

    metrics_cli.add_parser(commands)

    from toolsafe.gateway import cli as gateway_cli

    gateway_cli.add_parser(commands)

    from toolsafe.cli import mcp as mcp_cli

    mcp_cli.add_parser(commands)
    return parser


def _fail(code: int, message: str) -> int:
    sys.stderr.write(f"toolsafe: error: {message}\n")
    return code


def _first_line(error: BaseException | None) -> str:
    text = str(error).strip() if error is not None else ""
    return text.splitlines()[0] if text else type(error).__name__


def _run(args: argparse.Namespace) -> int:
    """The command, with every expected failure as one line and its exit code."""
    from kombu.exceptions import OperationalError as BrokerError
    from sqlalchemy.exc import DBAPIError, OperationalError, ProgrammingError

    from toolsafe.recovery.db import schema_missing
    from toolsafe.recovery.store import FeatureMissing

    try:
        code: int = args.handler(args)
    except (SettingsError, FeatureMissing) as error:
        # A store without the feature the command needs is a setting to change.
        return _fail(EXIT_USAGE, str(error))
    except ToolsafeError as error:
        return _fail(EXIT_REFUSED, str(error))
    except (OperationalError, ProgrammingError) as error:
        if error.orig is not None and schema_missing(error.orig):
            return _fail(
                EXIT_USAGE, "the database has no toolsafe schema: run `toolsafe migrate` first"
            )
        # The driver's message names host and port, not the password.
        return _fail(EXIT_UNREACHABLE, f"the database cannot be reached: {_first_line(error.orig)}")
    except DBAPIError as error:
        return _fail(EXIT_UNREACHABLE, f"the database refused: {_first_line(error.orig)}")
    except BrokerError as error:
        return _fail(EXIT_UNREACHABLE, f"the broker cannot be reached: {_first_line(error)}")
    except KeyboardInterrupt:
        return _fail(EXIT_INTERRUPTED, "interrupted")
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
    return _run(args)


if __name__ == "__main__":
    raise SystemExit(main())
