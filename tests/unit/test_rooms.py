"""Arrows point down only: surface and operator rooms → tasks → settings → recovery →
adapters, checked statically over every module's imports (relative ones resolved), in
the real folders the ``toolsafe`` package links in. And only the settings room reads the
environment.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "toolsafe"

CELERY = ("celery", "kombu", "billiard")
DATABASE = ("sqlalchemy", "alembic", "psycopg")
# The rooms above tasks/ (operator tools and the agent-facing surface), present or to come.
SURFACE = tuple(
    f"toolsafe.{room}"
    for room in (
        "cli", "demo", "chaos", "harness", "metrics", "worker", "reference", "gateway",
        "mcp", "ui", "integrations", "conformance", "agents", "testing", "up",
    )
)  # fmt: skip
# Names a toolsafe module must never import bare: a user's own tasks.py or
# celeryconfig.py would be found in toolsafe's place.
BARE = ("tasks", "adapters", "recovery", "celeryconfig", "settings")


def _modules(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(path.rglob("*.py"))


Room = tuple[list[Path], tuple[str, ...], tuple[str, ...]]


def _rooms() -> dict[str, Room]:
    """Each room's real files, the packages it must not import, and the only toolsafe
    modules it may import (nothing above it)."""
    return {
        "adapters": (
            _modules((PACKAGE / "adapters").resolve()),
            (*CELERY, *DATABASE),
            ("toolsafe.adapters",),
        ),
        "recovery": (
            _modules((PACKAGE / "recovery").resolve()),
            (*CELERY, "httpx"),
            ("toolsafe.recovery", "toolsafe.adapters"),
        ),
        "settings": (
            [
                PACKAGE / "settings.py",
                PACKAGE / "settings_parse.py",
                PACKAGE / "settings_sections.py",
            ],
            CELERY,
            (
                "toolsafe.settings",
                "toolsafe.settings_parse",
                "toolsafe.settings_sections",
                "toolsafe.recovery",
                "toolsafe.adapters",
            ),
        ),
        # OpenTelemetry glue (docs/tracing.md): above the settings (which read its OTEL_*
        # variables), below tasks/ and the surface; it fills the adapters' outgoing seam.
        "tracing": (
            _modules(PACKAGE / "tracing"),
            (*CELERY, *DATABASE),
            (
                "toolsafe.tracing",
                "toolsafe.settings",
                "toolsafe.settings_parse",
                "toolsafe.settings_sections",
                "toolsafe.recovery",
                "toolsafe.adapters",
            ),
        ),
        "celeryconfig": (
            _modules((PACKAGE / "celeryconfig.py").resolve()),
            (),
            ("toolsafe.settings", "toolsafe.recovery", "toolsafe.adapters", "toolsafe.broker"),
        ),
        # The agent-facing surface every stack shares: above tasks/, below the gateway,
        # the MCP server and the integrations (which import it, never the reverse).
        "agents": (
            _modules(PACKAGE / "agents"),
            (),
            (
                "toolsafe.agents",
                "toolsafe.tasks",
                "toolsafe.celeryconfig",
                "toolsafe.tracing",
                "toolsafe.settings",
                "toolsafe.recovery",
                "toolsafe.adapters",
                "toolsafe.broker",
            ),
        ),
        # The MCP server: the gateway mounts it and the CLI runs it, never the reverse.
        "mcp": (
            _modules(PACKAGE / "mcp"),
            (),
            (
                "toolsafe.mcp",
                "toolsafe.agents",
                "toolsafe.tasks",
                "toolsafe.celeryconfig",
                "toolsafe.tracing",
                "toolsafe.settings",
                "toolsafe.recovery",
                "toolsafe.adapters",
                "toolsafe.broker",
            ),
        ),
        "tasks": (
            _modules((PACKAGE / "tasks").resolve()),
            (),
            (
                "toolsafe.tasks",
                "toolsafe.celeryconfig",
                "toolsafe.tracing",
                "toolsafe.settings",
                "toolsafe.recovery",
                "toolsafe.adapters",
                "toolsafe.broker",
            ),
        ),
    }


def module_name(path: Path) -> str:
    """The dotted name a file has inside the installed package."""
    for link in PACKAGE.iterdir():
        if link.is_symlink():
            real = link.resolve()
            if path == real or real in path.parents:
                inner = path.relative_to(real).with_suffix("").parts if real.is_dir() else ()
                return ".".join(("toolsafe", link.stem, *inner)).removesuffix(".__init__")
    inner = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(("toolsafe", *inner)).removesuffix(".__init__")


def imported_modules(path: Path, name: str | None = None) -> set[str]:
    """Every module ``path`` (the module ``name``) imports, relative imports resolved to
    absolute names (``from x import y`` counts as ``x`` and ``x.y``: y may be a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    name = name or module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            if source != "toolsafe":  # `from toolsafe import x`: only x says which room
                names.add(source)
            names.update(f"{source}.{alias.name}" for alias in node.names)
    return names


def module_name_or(path: Path, names: dict[Path, str] | None) -> str:
    return (names or {}).get(path) or module_name(path)


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def offences(room: Room, names: dict[Path, str] | None = None) -> list[str]:
    files, forbidden, allowed = room
    found = []
    for path in files:
        for name in sorted(imported_modules(path, (names or {}).get(path))):
            top = name.split(".")[0]
            bad = top in forbidden or top in BARE
            if _under(name, "toolsafe") and not any(_under(name, ok) for ok in allowed):
                # A `from toolsafe.x import y` adds toolsafe.x.y too: judge the module.
                bad = bad or not any(_under(name.rpartition(".")[0], ok) for ok in allowed)
            if bad:
                found.append(f"{path.name} ({module_name_or(path, names)}) imports {name}")
    return sorted(set(found))


@pytest.mark.parametrize("room", sorted(_rooms()))
def test_room_imports_stay_inside_their_bounds(room: str) -> None:
    files = _rooms()[room][0]
    assert files and all(path.exists() for path in files), f"no modules found for {room}"
    problems = offences(_rooms()[room])
    assert not problems, "\n".join(problems)


def test_the_linked_rooms_are_the_top_level_folders() -> None:
    for room in ("adapters", "recovery", "tasks"):
        assert (PACKAGE / room).resolve() == ROOT / room
    assert (PACKAGE / "celeryconfig.py").resolve() == ROOT / "celeryconfig.py"


def test_tasks_may_not_import_the_rooms_above() -> None:
    for room in SURFACE:
        assert not any(_under(room, ok) for ok in _rooms()["tasks"][2]), room


def test_relative_imports_are_resolved(tmp_path: Path) -> None:
    path = (PACKAGE / "tasks" / "app.py").resolve()
    assert module_name(path) == "toolsafe.tasks.app"
    assert module_name((PACKAGE / "tasks" / "__init__.py").resolve()) == "toolsafe.tasks"
    assert module_name(PACKAGE / "cli" / "main.py") == "toolsafe.cli.main"
    # A relative import that climbs into a higher room is caught like an absolute one.
    probe = tmp_path / "probe.py"
    probe.write_text("from ..tasks import app\nfrom . import states\n", encoding="utf-8")
    name = {probe: "toolsafe.recovery.probe"}
    names = imported_modules(probe, name[probe])
    assert {"toolsafe.tasks", "toolsafe.tasks.app", "toolsafe.recovery.states"} <= names
    _, forbidden, allowed = _rooms()["recovery"]
    found = offences(([probe], forbidden, allowed), name)
    assert found == [
        "probe.py (toolsafe.recovery.probe) imports toolsafe.tasks",
        "probe.py (toolsafe.recovery.probe) imports toolsafe.tasks.app",
    ]


def test_no_module_imports_a_bare_room_name() -> None:
    problems = []
    for path in _package_files():
        for name in imported_modules(path):
            if name.split(".")[0] in BARE:
                problems.append(f"{path} imports {name}")
    assert not problems, "\n".join(problems)


# ----------------------------------------------------------------------------- environment

SETTINGS_ROOM = {PACKAGE / "settings.py"}
ENV_FUNCTIONS = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def _package_files() -> Iterator[Path]:
    """Every module of the installed package, through the linked rooms (real paths)."""
    seen: set[Path] = set()
    for entry in sorted(PACKAGE.iterdir()):
        for path in _modules(entry.resolve()):
            if path.suffix == ".py" and path not in seen:
                seen.add(path)
                yield path


def environment_reads(path: Path) -> list[str]:
    """Where ``path`` touches the process environment (os.environ, os.getenv, ...)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ENV_FUNCTIONS:
            found.append((node.lineno, f"uses .{node.attr}"))
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            for alias in node.names:
                if alias.name in ENV_FUNCTIONS:
                    found.append((node.lineno, f"imports os.{alias.name}"))
        elif isinstance(node, ast.Name) and node.id in ENV_FUNCTIONS:
            found.append((node.lineno, f"uses {node.id}"))
    return [f"{path.name}:{line} {what}" for line, what in sorted(found)]


def test_only_the_settings_room_reads_the_environment() -> None:
    files = list(_package_files())
    assert len(files) > 50 and ROOT / "tasks" / "app.py" in files
    problems = [
        f"{path.relative_to(ROOT)}: {item}"
        for path in files
        if path not in SETTINGS_ROOM
        for item in environment_reads(path)
    ]
    assert not problems, "\n".join(problems)


def test_the_environment_scan_would_catch_a_read(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import os\nfrom os import getenv\nA = os.environ.get('X')\nB = getenv('Y')\n",
        encoding="utf-8",
    )
    assert environment_reads(probe) == [
        "probe.py:2 imports os.getenv",
        "probe.py:3 uses .environ",
        "probe.py:4 uses getenv",
    ]
    assert environment_reads(PACKAGE / "settings.py")  # the room itself does read it


# ----------------------------------------------------------------------------- agent SDKs

# The agent SDKs toolsafe integrates with, by the names they are imported under.
SDKS = ("anthropic", "openai", "agents", "pydantic_ai", "langgraph", "langchain_core", "mcp")
SDKS_TOO = ("mcp_types",)


def import_time_modules(path: Path) -> set[str]:
    """The absolute modules ``path`` imports when it is imported: not those imported in a
    function body or under ``if TYPE_CHECKING:``."""
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                found.add(node.module)
            elif isinstance(node, ast.If):
                checking = ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
                visit(node.orelse if checking else [*node.body, *node.orelse])
            elif isinstance(node, ast.Try):
                visit([*node.body, *node.orelse, *node.finalbody])
                for handler in node.handlers:
                    visit(handler.body)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)).body)
    return found


def test_the_stacks_pieces_import_no_sdk() -> None:
    """``toolsafe.agents`` holds each stack's SDK-free pieces (docs/agents.md): importing
    any of its modules loads no agent SDK, so a user without one still builds the tool
    definitions, refs and answers. The SDKs are the integrations' business."""
    files = _modules(PACKAGE / "agents")
    assert PACKAGE / "agents" / "anthropic.py" in files
    problems = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in files
        for name in sorted(import_time_modules(path))
        if name.split(".")[0] in (*SDKS, *SDKS_TOO)
    ]
    assert not problems, "\n".join(problems)


def test_the_sdk_scan_would_catch_an_import_and_skips_deferred_ones(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\n"
        "import anthropic.types\n"
        "try:\n    from openai import OpenAI\nexcept ImportError:\n    pass\n"
        "if TYPE_CHECKING:\n    from pydantic_ai.tools import ToolDefinition\n"
        "def later():\n    import langgraph\n",
        encoding="utf-8",
    )
    assert import_time_modules(probe) == {"typing", "anthropic.types", "openai"}


# ----------------------------------------------------------------------------- the store

STORE = ROOT / "recovery" / "store"
STORE_PACKAGE = "toolsafe.recovery.store"
BACKENDS = ("sql", "memory")


def _backend_imports(path: Path, backends: tuple[str, ...], module: str | None = None) -> list[str]:
    return sorted(
        name
        for name in imported_modules(path, module)
        for backend in backends
        if _under(name, f"{STORE_PACKAGE}.{backend}")
    )


def test_the_stores_ground_floor_imports_no_backend() -> None:
    """The port and the definitions every backend shares stand below the backends."""
    ground = sorted(STORE.glob("*.py"))
    assert STORE / "port.py" in ground and STORE / "shared.py" in ground
    problems = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in ground
        for name in _backend_imports(path, BACKENDS)
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_backend_imports_another(backend: str) -> None:
    files = _modules(STORE / backend)
    assert files, f"no modules in recovery/store/{backend}"
    others = tuple(other for other in BACKENDS if other != backend)
    problems = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in files
        for name in _backend_imports(path, others)
    ]
    assert not problems, "\n".join(problems)


def test_nothing_outside_the_store_reaches_into_a_backend() -> None:
    """Every other module goes through ``open_store`` and the port: no backend's module
    imported, no store's ``.engine`` touched (``open_store`` names the backends by path)."""
    problems = []
    for path in _package_files():
        if path == STORE or STORE in path.parents:
            continue
        problems += [
            f"{path.relative_to(ROOT)} imports {name}" for name in _backend_imports(path, BACKENDS)
        ]
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        problems += [
            f"{path.relative_to(ROOT)}:{node.lineno} reads .engine"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr == "engine"
        ]
    assert not problems, "\n".join(problems)


def test_the_floor_scan_would_catch_a_backend_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from toolsafe.recovery.store.sql.steps import StepStore\n"
        "from toolsafe.recovery.store import memory\n"
        "from toolsafe.recovery.store import shared\n",
        encoding="utf-8",
    )
    assert _backend_imports(probe, BACKENDS, "toolsafe.recovery.store.probe") == [
        "toolsafe.recovery.store.memory",
        "toolsafe.recovery.store.sql.steps",
        "toolsafe.recovery.store.sql.steps.StepStore",
    ]


# ----------------------------------------------------------------------------- cycles


def import_cycles(files: list[Path], names: dict[Path, str] | None = None) -> list[list[str]]:
    """The groups of modules among ``files`` that import each other, directly or round
    about (every import counted: deferred and type-checking ones too)."""
    modules = {module_name_or(path, names): path for path in files}
    graph = {
        name: sorted(
            found for found in imported_modules(path, name) if found in modules and found != name
        )
        for name, path in modules.items()
    }
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(name: str) -> None:  # Tarjan's strongly connected components
        order[name] = low[name] = len(order)
        stack.append(name)
        for found in graph[name]:
            if found not in order:
                visit(found)
                low[name] = min(low[name], low[found])
            elif found in stack:
                low[name] = min(low[name], order[found])
        if low[name] == order[name]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == name:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for name in sorted(graph):
        if name not in order:
            visit(name)
    return cycles


def test_the_tasks_room_has_no_import_cycle() -> None:
    files = _modules((PACKAGE / "tasks").resolve())
    assert (PACKAGE / "tasks" / "worker_lost.py").resolve() in files
    assert import_cycles(files) == []


def test_the_cycle_scan_would_catch_a_cycle(tmp_path: Path) -> None:
    package = tmp_path / "toolsafe" / "tasks"
    package.mkdir(parents=True)
    (package / "a.py").write_text("from toolsafe.tasks import b\n", encoding="utf-8")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from toolsafe.tasks.a import A\n",
        encoding="utf-8",
    )
    (package / "c.py").write_text("import toolsafe.tasks.a\n", encoding="utf-8")
    files = sorted(package.glob("*.py"))
    names = {path: f"toolsafe.tasks.{path.stem}" for path in files}
    assert import_cycles(files, names) == [["toolsafe.tasks.a", "toolsafe.tasks.b"]]


# ----------------------------------------------------------------------------- the CLI

CLI_ROOMS = (
    "demo/run.py",
    "chaos/cli.py",
    "conformance/cli.py",
    "metrics/cli.py",
    "gateway/cli.py",
    "cli/mcp.py",
    "cli/workers.py",
    "up/run.py",
)


def test_each_room_registers_its_commands_under_one_name() -> None:
    """``toolsafe.cli.main`` calls ``add_parser(commands)`` of every room with commands."""
    main = (PACKAGE / "cli" / "main.py").read_text(encoding="utf-8")
    for relative in CLI_ROOMS:
        tree = ast.parse((PACKAGE / relative).read_text(encoding="utf-8"))
        defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert "add_parser" in defined and "add_commands" not in defined, relative
    assert "add_commands" not in main and main.count(".add_parser(commands)") == len(CLI_ROOMS)
