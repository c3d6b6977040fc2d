"""docs/writing-an-adapter.md works as written: its Python blocks run, in order, and the
tests it shows pass against the example downstream; its excerpts match the code."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from toolsafe.adapters.registry import Registry

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "writing-an-adapter.md"
EXCERPT = "# excerpt: "


def _blocks(language: str) -> list[str]:
    text = GUIDE.read_text(encoding="utf-8")
    return re.findall(rf"^```{language}\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)


def _guide_namespace() -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "writing_an_adapter"}
    for block in _blocks("python"):
        if not block.startswith(EXCERPT):
            exec(compile(block, str(GUIDE), "exec"), namespace)  # noqa: S102 - our own doc
    return namespace


GUIDE_CODE = _guide_namespace()
GUIDE_TESTS = sorted(name for name in GUIDE_CODE if name.startswith("test_"))


def test_the_guide_shows_tests() -> None:
    assert len(GUIDE_TESTS) >= 5


@pytest.mark.parametrize("name", GUIDE_TESTS)
def test_the_guides_adapter_passes_the_guides_tests(name: str) -> None:
    GUIDE_CODE[name]()


def test_the_guides_register_function_registers_the_tool() -> None:
    registry = Registry()
    GUIDE_CODE["register"](registry)
    adapter = registry.get("send_payment_reminder")
    adapter.close()  # type: ignore[attr-defined]
    assert adapter.writes and adapter.has_lookup


def test_excerpts_are_verbatim_from_the_code() -> None:
    excerpts = [block for block in _blocks("python") if block.startswith(EXCERPT)]
    assert excerpts
    for block in excerpts:
        first, _, body = block.partition("\n")
        source = (ROOT / first.removeprefix(EXCERPT).strip()).read_text(encoding="utf-8")
        assert body in source, f"the excerpt of {first} no longer matches the code"


def test_the_shell_commands_name_real_things() -> None:
    commands = "\n".join(_blocks("sh"))
    assert "python -m toolsafe.reference > docs/envelope-reference.md" in commands
    assert (ROOT / "toolsafe" / "reference.py").exists()
    assert "toolsafe worker" in commands
