"""The newcomer's pages agree with the code: links resolve, the README's two commands are
the Makefile's, and the architecture page names every state and every durability rule."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from toolsafe.recovery.states import StepState

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    ROOT / "README.md",
    ROOT / "docs" / "architecture.md",
    ROOT / "docs" / "writing-an-adapter.md",
    ROOT / "docs" / "envelope-reference.md",
]
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_relative_links_resolve(page: Path) -> None:
    for target in _LINK.findall(page.read_text(encoding="utf-8")):
        if "://" in target:
            continue
        assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


def test_the_readme_starts_with_the_two_commands_of_the_makefile() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in block.splitlines()]
    assert commands[:2] == ["make up", "make test"]
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    up_recipe = makefile.split("\nup:", 1)[1].split("\n\n", 1)[0]
    assert "toolsafe up" in up_recipe
    # `make up` installs the package and the gateway extra only, and loudly.
    up_install = makefile.split("\n$(VENV)/.installed-up:", 1)[1].split("\n\n", 1)[0]
    assert "pip install" in up_install and "'.[gateway]'" in up_install
    assert "--quiet" not in up_install and "-q " not in up_install
    demo_recipe = makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    assert "toolsafe demo" in demo_recipe
    # The demo installs only what the main job needs, and loudly.
    main_install = makefile.split("\n$(VENV)/.installed-main:", 1)[1].split("\n\n", 1)[0]
    assert "pip install" in main_install and "[dev]" not in main_install
    assert "--quiet" not in main_install and "-q " not in main_install
    assert "\ndemo: venv\n" in makefile and "\nvenv: $(VENV)/.installed-main\n" in makefile


def test_the_architecture_page_names_every_state_and_rule() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    for state in StepState:
        assert f"`{state.value}`" in text, state
    for number in range(1, 11):
        assert f"| **R{number}** |" in text, f"R{number}"
    diagram = text.split("```mermaid\n", 1)[1].split("```", 1)[0]
    # Mermaid ends a statement at ";": a semicolon inside a message breaks the diagram.
    assert ";" not in diagram
    for participant in ("Agent", "DB", "Broker", "Worker", "Adapter", "Down"):
        assert f"participant {participant} as" in diagram


def test_every_module_the_rooms_table_names_exists() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(adapters|recovery|tasks)/` \|(.*)$", text, flags=re.MULTILINE)
    assert {room for room, _ in rows} == {"adapters", "recovery", "tasks"}
    # Every room of the package has its line, and every line names a real room.
    named = set(re.findall(r"^\| `(toolsafe/[a-z_]+(?:\.py|/))` \|", text, flags=re.MULTILINE))
    package = ROOT / "toolsafe"
    rooms = {
        f"toolsafe/{path.name}" + ("/" if path.is_dir() else "")
        for path in package.iterdir()
        if not path.is_symlink()
        and path.name not in {"__init__.py", "__main__.py", "py.typed", "__pycache__"}
    }
    assert named == rooms
    for room, row in rows:
        for name in re.findall(r"`([a-z_]+\.py|[a-z_]+/)`", row):
            here = ROOT / room / name
            elsewhere = ROOT / name  # celeryconfig.py sits at the top
            assert here.exists() or elsewhere.exists(), f"{room}/{name}"
