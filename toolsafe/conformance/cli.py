"""``toolsafe check-adapter MODULE:TOOL --sample-input FILE [--base-url URL] [--json]``:
the report on stdout, exit 0 when every scenario passed, 1 on any violation, 2 when the
adapter or the sample input cannot be used."""

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
    check.add_argument(
        "--base-url",
        default=None,
        metavar="URL",
        help="the service to put the fault proxy in front of (default: the adapter's own)",
    )
    check.add_argument(
        "--timeout",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="the read timeout the adapter gets during the run; the slow-answer scenarios "
        "wait this long plus 1.5 s (default 1.0)",
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
        adapter = load_adapter(args.spec)
        report = check_adapter(adapter, sample, base_url=args.base_url, timeout=args.timeout)
    except (SampleInputError, ToolsafeError, ValueError) as error:
        return _usage(str(error))
    sys.stdout.write(report.json_text() if args.json else report.text())
    return 0 if report.passed else EXIT_VIOLATION


def _usage(message: str) -> int:
    sys.stderr.write(f"toolsafe check-adapter: error: {message}\n")
    return EXIT_USAGE
