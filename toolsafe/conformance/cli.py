"""``toolsafe check-adapter MODULE:TOOL --sample-input FILE (--base-url URL |
--target-from-settings | --dry-run) [--json]``: the adapter is built from its settings
as a worker builds it (``TOOLSAFE_<PREFIX>_*``); the target it writes to is printed on
stderr before anything is sent, and a write adapter runs only against a target named
here. The report on stdout; exit 0 when no scenario failed, 1 on any violation, 2 when
the adapter, the sample input or the target cannot be used."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

EXIT_VIOLATION = 1
EXIT_USAGE = 2


def add_parser(commands: Any) -> None:
    check = commands.add_parser(
        "check-adapter",
        help="run an adapter through the conformance scenarios against its (staging) service",
        description=__doc__,
    )
    check.add_argument("spec", metavar="MODULE:TOOL", help="e.g. my_company.billing:create_invoice")
    check.add_argument(
        "--sample-input", required=True, metavar="FILE", help="a JSON object the tool accepts"
    )
    aim = check.add_mutually_exclusive_group()
    aim.add_argument(
        "--base-url",
        default=None,
        metavar="URL",
        help="the (staging) service to write to, through the kit's fault proxy",
    )
    aim.add_argument(
        "--target-from-settings",
        action="store_true",
        help="write to the target the adapter's settings name (TOOLSAFE_<PREFIX>_*)",
    )
    aim.add_argument(
        "--dry-run",
        action="store_true",
        help="run every scenario against an in-process double; nothing leaves this process",
    )
    check.add_argument(
        "--timeout",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="the read timeout the adapter gets during the run (default 1.0); in the "
        "slow-answer scenarios the answer is held until the adapter gives up, after a "
        "timeout of 0.2 s (at most this), and never longer than this plus 1.5 s",
    )
    check.add_argument("--json", action="store_true", help="the report as JSON")
    check.add_argument(
        "--verbose", action="store_true", help="show the adapter's own log lines on stderr"
    )
    check.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from toolsafe.adapters.errors import ToolsafeError
    from toolsafe.conformance import SampleInputError, check_adapter, load_adapter, read_sample

    if not args.timeout > 0:
        return _usage("--timeout must be a positive number of seconds")
    if not args.verbose:
        # Every injected fault makes a well-behaved adapter log a warning; the table says it.
        logging.getLogger("toolsafe").setLevel(logging.ERROR)
    try:
        sample = read_sample(args.sample_input)
        loaded = load_adapter(args.spec)
        report = check_adapter(
            loaded,
            sample,
            base_url=args.base_url,
            target_from_settings=args.target_from_settings,
            dry_run=args.dry_run,
            timeout=args.timeout,
            announce=_announce,
        )
    except (SampleInputError, ToolsafeError, ValueError) as error:
        return _usage(str(error))
    sys.stdout.write(report.json_text() if args.json else report.text())
    return 0 if report.passed else EXIT_VIOLATION


def _announce(line: str) -> None:
    sys.stderr.write(f"toolsafe check-adapter: {line}\n")
    sys.stderr.flush()


def _usage(message: str) -> int:
    sys.stderr.write(f"toolsafe check-adapter: error: {message}\n")
    return EXIT_USAGE
