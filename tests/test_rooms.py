"""The three rooms keep their arrows one way: tasks → recovery → adapters.

`adapters` and `recovery` never import Celery; `adapters` never imports the database
layer or `recovery`/`tasks`. Checked statically over every module's imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FORBIDDEN = {
    "adapters": (
        "celery",
        "kombu",
        "billiard",
        "sqlalchemy",
        "alembic",
        "psycopg",
        "recovery",
        "tasks",
    ),
    "recovery": ("celery", "kombu", "billiard", "tasks", "httpx"),
}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_room_imports_stay_inside_their_bounds(room: str) -> None:
    files = sorted((ROOT / room).rglob("*.py"))
    assert files, f"no modules found in {room}/"
    offences = []
    for path in files:
        for name in imported_modules(path):
            top = name.split(".")[0]
            if top in FORBIDDEN[room]:
                offences.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not offences, "\n".join(offences)
