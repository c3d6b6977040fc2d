"""Every command the compose file runs exists in the CLI (checked by running it)."""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Mapping
from typing import Any

from tests.unit.test_compose import _check_command, _ours, _own_default_app, compose  # noqa: F401


def _commands(service: Mapping[str, Any]) -> Iterator[list[str]]:
    """The command and the healthcheck command of a service, as argument lists."""
    if "command" in service:
        command = service["command"]
        yield command if isinstance(command, list) else shlex.split(command)
    test = service.get("healthcheck", {}).get("test")
    if isinstance(test, list) and test[0] == "CMD":
        yield test[1:]
    elif isinstance(test, list) and test[0] == "CMD-SHELL":
        yield shlex.split(test[1])


def test_every_command_exists_in_the_cli(compose: dict[str, Any]) -> None:  # noqa: F811
    checked = 0
    for name, service in _ours(compose).items():
        for argv in _commands(service):
            _check_command(argv)
            checked += 1
        assert "command" in service, f"{name} must say what it runs"
    assert checked >= 6
