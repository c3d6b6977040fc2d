"""The CLI's exit codes (``docs/operations.md``, "Exit codes")."""

from __future__ import annotations

from typing import Final

EXIT_OK: Final = 0
EXIT_REFUSED: Final = 1
"""Refused or not found: the message says why."""
EXIT_USAGE: Final = 2
"""Bad usage, a bad setting, or a database without toolsafe's schema."""
EXIT_UNREACHABLE: Final = 3
"""The database or the broker cannot be reached. After an operator action it means the
action was committed and only its hint waits for the broker (the sweeper sends it)."""
EXIT_INTERRUPTED: Final = 130
