"""Celery wiring: the app, the tasks, the sweeper, the client API and the CLI.

``celery -A tasks worker|beat|flower`` finds the app as ``tasks.celery``, built from
the ``TOOLSAFE_*`` environment on first access (never at import time).
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "celery":
        from tasks.app import default_app

        return default_app()
    raise AttributeError(f"module 'tasks' has no attribute {name!r}")
