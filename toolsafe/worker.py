"""The app that ``celery -A toolsafe`` and ``toolsafe worker|beat`` run: the process's
default app with the operator exporter (``/metrics``) installed when its port is set."""

from __future__ import annotations

import threading

from toolsafe.tasks.app import ToolsafeApp
from toolsafe.tasks.app import default_app as _tasks_default_app

_installed: set[int] = set()
_lock = threading.Lock()


def default_app() -> ToolsafeApp:
    """The process's app, built from the environment on first use."""
    app = _tasks_default_app()
    with _lock:
        if id(app) not in _installed:
            from toolsafe.metrics import exporter

            exporter.install(app)
            _installed.add(id(app))
    return app
