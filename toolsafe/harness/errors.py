"""The harness's errors: one root, so a caller (the demo, a benchmark, the chaos run)
catches everything the harness refuses or fails at with one ``except``."""

from __future__ import annotations


class HarnessError(Exception):
    """The harness could not do what was asked; the message says what and why."""


class ProcessStartError(HarnessError):
    """A child process exited, or did not say it was ready, before its timeout."""


class WaitTimeout(HarnessError, TimeoutError):
    """A condition waited on did not become true in time."""


class BrokerError(HarnessError, ValueError):
    """A broker URL the harness must not clear: not Redis, or not a dedicated db."""
