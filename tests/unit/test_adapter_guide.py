"""docs/writing-an-adapter.md works as written: the Python blocks of each part run, in
order, as one module (``<!-- guide-module: NAME -->`` starts the next), the tests they
show pass against the example downstream, its excerpts match the code and its commands
are ones the CLI accepts."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from toolsafe.adapters.registry import Registry
from toolsafe.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "writing-an-adapter.md"
EXCERPT = "# excerpt: "
_MODULE = re.compile(r"^<!-- guide-module: ([a-z_]+) -->$", re.MULTILINE)
_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def _blocks(language: str) -> list[str]:
    text = GUIDE.read_text(encoding="utf-8")
    return [body for lang, body in _BLOCK.findall(text) if lang == language]


def _modules() -> dict[str, list[str]]:
    """The python blocks by the guide module they belong to, in order."""
    text = GUIDE.read_text(encoding="utf-8")
    marks = [(match.start(), match.group(1)) for match in _MODULE.finditer(text)]
    modules: dict[str, list[str]] = {name: [] for _, name in marks}
    for match in _BLOCK.finditer(text):
        if match.group(1) != "python" or match.group(2).startswith(EXCERPT):
            continue
        owners = [name for start, name in marks if start < match.start()]
        assert owners, "a python block comes before the first guide-module marker"
        modules[owners[-1]].append(match.group(2))
    return modules


def _namespace(name: str, blocks: list[str]) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": f"writing_an_adapter_{name}"}
    for block in blocks:
        exec(compile(block, str(GUIDE), "exec"), namespace)  # noqa: S102 - our own doc
    return namespace


GUIDE_MODULES = {name: _namespace(name, blocks) for name, blocks in _modules().items()}
GUIDE_TESTS = sorted(
    (module, name)
    for module, namespace in GUIDE_MODULES.items()
    for name in namespace
    if name.startswith("test_")
)


def test_the_guide_walks_both_ways() -> None:
    assert set(GUIDE_MODULES) == {"receipts", "reminders"}
    for module in GUIDE_MODULES:
        assert len([test for test in GUIDE_TESTS if test[0] == module]) >= 4, module


@pytest.mark.parametrize(
    ("module", "tools"),
    [("reminders", {"send_payment_reminder"}), ("receipts", {"send_receipt", "receipt_status"})],
)
def test_the_guides_register_functions_register_the_tools(module: str, tools: set[str]) -> None:
    registry = Registry()
    GUIDE_MODULES[module]["register"](registry)
    assert set(registry.tools()) == tools
    for tool in tools:
        adapter = registry.get(tool)
        adapter.close()  # type: ignore[attr-defined]
    writer = registry.get(sorted(tools)[-1])
    assert writer.writes and writer.has_lookup


def test_the_decorated_function_is_described_by_its_signature_and_docstring() -> None:
    namespace = GUIDE_MODULES["receipts"]
    client = namespace["ReceiptClient"]("http://127.0.0.1:9")
    try:
        adapter = namespace["make_send_receipt"](client)
    finally:
        client.close()
    assert adapter.tool == "send_receipt"
    assert set(adapter.input_model.model_fields) == {"recipient_email", "invoice_id"}
    assert adapter.description.startswith("E-mail the receipt")


def test_the_list_lookup_needs_no_override_of_lookup() -> None:
    listed = GUIDE_MODULES["reminders"]["CreateListedInvoice"]
    assert "lookup" not in vars(listed) and "parse_lookup" not in vars(listed)


def test_excerpts_are_verbatim_from_the_code() -> None:
    excerpts = [block for block in _blocks("python") if block.startswith(EXCERPT)]
    assert excerpts
    for block in excerpts:
        first, _, body = block.partition("\n")
        source = (ROOT / first.removeprefix(EXCERPT).strip()).read_text(encoding="utf-8")
        assert body in source, f"the excerpt of {first} no longer matches the code"


def _toolsafe_commands() -> list[list[str]]:
    text = "\n".join(_blocks("sh")).replace("\\\n", " ")
    return [shlex.split(line)[1:] for line in text.splitlines() if line.startswith("toolsafe ")]


def test_the_shell_commands_name_real_things() -> None:
    commands = "\n".join(_blocks("sh"))
    assert "python -m toolsafe.reference > docs/envelope-reference.md" in commands
    assert (ROOT / "toolsafe" / "reference.py").exists()
    assert "toolsafe worker" in commands
    assert "toolsafe check-adapter" in commands


@pytest.mark.parametrize("argv", _toolsafe_commands(), ids=" ".join)
def test_every_toolsafe_command_of_the_guide_parses(argv: list[str]) -> None:
    args, extra = build_parser().parse_known_args(argv)
    assert not extra or getattr(args, "passthrough", False)


def test_the_guides_anchors_lead_to_its_headings() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    slugs = {
        re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-")
        for heading in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)
    }
    anchors = re.findall(r"\]\(#([^)]+)\)", text)
    assert anchors
    assert set(anchors) <= slugs, set(anchors) - slugs
