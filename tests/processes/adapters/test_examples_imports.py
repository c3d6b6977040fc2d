"""The example adapters import neither Celery nor the database (checked in a fresh interpreter)."""

from __future__ import annotations

from tests.services.adapters.test_examples import _close_adapters  # noqa: F401


def test_adapters_import_neither_celery_nor_the_database() -> None:
    import subprocess
    import sys

    code = (
        "import sys, toolsafe.adapters.examples, toolsafe.adapters.http, "
        "toolsafe.adapters.guard, toolsafe.adapters.redaction;"
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('celery', 'kombu', 'sqlalchemy', 'psycopg', 'redis') "
        "or m.startswith(('toolsafe.recovery', 'toolsafe.tasks'))];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
