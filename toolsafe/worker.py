"""The app that ``celery -A toolsafe`` and ``toolsafe worker|beat`` run: the process's
default app with the operator exporter (``/metrics``) installed when its port is set."""

from __future__ import annotations

import sys
import threading

from toolsafe.settings import Settings, load_settings_or_exit
from toolsafe.tasks.app import ToolsafeApp
from toolsafe.tasks.app import default_app as _tasks_default_app

_installed: set[int] = set()
_lock = threading.Lock()


def default_app(settings: Settings | None = None) -> ToolsafeApp:
    """The process's app, built on first use from ``settings`` or else from the
    environment, checked at once: a bad value exits with code 2 before Celery starts."""
    if settings is None and not _tasks_default_built():
        settings = load_settings_or_exit(what=_what())
    app = _tasks_default_app(settings)
    with _lock:
        if id(app) not in _installed:
            from toolsafe.metrics import exporter

            exporter.install(app)
            _installed.add(id(app))
    return app


def _tasks_default_built() -> bool:
    from toolsafe.tasks import app

    return app._default is not None


def _what() -> str:
    """The process the settings stop, for the one line it prints (``celery -A toolsafe
    worker`` → "the worker")."""
    words = sys.argv[1:]
    for word, what in (("worker", "the worker"), ("beat", "beat"), ("flower", "flower")):
        if word in words:
            return what
    return "the Celery app"
