"""The store's callers go through its port: the pipeline, the client, the CLI, the
metrics exporter and the chaos run import no SQLAlchemy (beyond its exception types, to
report an unreachable database) and no table definitions, and the pipeline and client
never name the SQL implementation. Checked statically."""

from __future__ import annotations

import pytest

from tests.unit.test_rooms import ROOT, imported_modules

USERS = [
    "tasks/pipeline.py",
    "tasks/client.py",
    "tasks/views.py",
    "tasks/escalation.py",
    "toolsafe/cli/main.py",
    "toolsafe/cli/ops.py",
    "toolsafe/metrics/exporter.py",
    "toolsafe/chaos/run.py",
    "toolsafe/chaos/cli.py",
]
TABLES = ("sqlalchemy", "toolsafe.recovery.schema", "toolsafe.recovery.store.sql")


@pytest.mark.parametrize("module", USERS)
def test_store_users_import_no_tables(module: str) -> None:
    found = imported_modules(ROOT / module)
    offences = sorted(
        name
        for name in found
        if name.startswith(TABLES) and name.split(".")[:2] != ["sqlalchemy", "exc"]
    )
    assert not offences, f"{module} imports {offences}"


@pytest.mark.parametrize("module", ["tasks/pipeline.py", "tasks/client.py"])
def test_the_pipeline_and_client_do_not_name_the_sql_store(module: str) -> None:
    text = (ROOT / module).read_text(encoding="utf-8")
    assert "StepStore" not in text and "engine" not in text
