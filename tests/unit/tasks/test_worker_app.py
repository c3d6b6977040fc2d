"""A dead pool child's leases are recovered for toolsafe's app only: ``worker_lost``
knows the app by what it needs of it (its runtime and publisher), never by importing
``tasks/app.py`` (which imports it)."""

from __future__ import annotations

from celery import Celery

from toolsafe.settings import Settings
from toolsafe.tasks.app import create_app
from toolsafe.tasks.worker_lost import WorkerApp


def test_only_toolsafes_app_has_what_recovery_needs() -> None:
    app = create_app(Settings())
    try:
        assert isinstance(app, WorkerApp)
        assert app.runtime.settings.calls.lease == Settings().calls.lease
    finally:
        app.close()
    assert not isinstance(Celery(), WorkerApp)
