"""Reads the package's source (AST, no imports) for the codes it raises, returns, compares,
passes and builds, and for the sets of step states it spells out, so a test can hold each
to its catalogue (``tests/unit/test_vocabulary.py``)."""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from toolsafe.recovery.states import StepState

# UPPER_SNAKE (two words or more), or one upper-case word of four letters or more.
CODE: Final = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$|^[A-Z]{4,}$")
# The constant head of a code built at run time: f"LOOKUP_HTTP_{status}".
BUILT_HEAD: Final = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*_$")
FAMILY: Final = "<…>"
"""How a built code is reported: its constant head, then this."""

STATE_MEMBERS: Final = frozenset(state.name for state in StepState)
STATE_VALUES: Final = frozenset(state.value for state in StepState)
STATE_NAMES: Final = frozenset({"S", "StepState"})


@dataclass(frozen=True, order=True)
class Found:
    path: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.text}"


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the string constants that are docstrings (or bare string statements)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            found.add(id(node.value))
    return found


def _exported_names(tree: ast.Module) -> set[int]:
    """ids of the constants in ``__all__``: names of objects, not codes."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                found.update(
                    id(inner) for inner in ast.walk(node) if isinstance(inner, ast.Constant)
                )
    return found


def _head(node: ast.expr) -> str | None:
    """The constant head of a code built by an f-string or ``"HEAD_" + …``."""
    if isinstance(node, ast.JoinedStr) and node.values:
        first = node.values[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return first.value if BUILT_HEAD.match(first.value) else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left = node.left
        if isinstance(left, ast.Constant) and isinstance(left.value, str):
            return left.value if BUILT_HEAD.match(left.value) else None
    return None


def codes_in(source: str, path: str = "<source>") -> list[Found]:
    """Every code-like string constant of ``source``, and every code it builds (reported
    as ``HEAD_<…>``); docstrings and ``__all__`` are left out."""
    tree = ast.parse(source)
    skip = _docstrings(tree) | _exported_names(tree)
    found: list[Found] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr | ast.BinOp):
            head = _head(node)
            if head is not None:
                found.append(Found(path, node.lineno, head + FAMILY))
                skip.update(id(part) for part in ast.walk(node) if isinstance(part, ast.Constant))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in skip
            and CODE.match(node.value)
        ):
            found.append(Found(path, node.lineno, node.value))
    return sorted(found)


def _state_member(node: ast.expr) -> bool:
    """``S.PENDING``, ``StepState.PENDING``, their ``.value``, or a state's value."""
    if isinstance(node, ast.Attribute) and node.attr == "value":
        node = node.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.value.id in STATE_NAMES and node.attr in STATE_MEMBERS
    return isinstance(node, ast.Constant) and node.value in STATE_VALUES


def state_sets_in(source: str, path: str = "<source>") -> list[Found]:
    """Collections of two or more step states spelled out in ``source`` (a lifecycle edge
    used as a key, ``LABELS[(src, dst)]``, is not a set)."""
    tree = ast.parse(source)
    keys: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            keys.add(id(node.slice))
    found: list[Found] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Set | ast.List | ast.Tuple) and id(node) not in keys:
            members = [element for element in node.elts if _state_member(element)]
            if len(members) >= 2:
                shown = ast.unparse(node)
                found.append(Found(path, node.lineno, shown))
    return sorted(found)


def package_sources(root: Path, skip: Mapping[str, str]) -> Iterator[tuple[str, str]]:
    """(path relative to ``root``, source) of every module of the package, the linked rooms
    included; ``skip`` maps a relative path (or folder) to why it is left out."""
    for folder, dirs, files in os.walk(root, followlinks=True):
        dirs.sort()
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = Path(folder, name)
            relative = path.relative_to(root).as_posix()
            if any(relative == left or relative.startswith(left + "/") for left in skip):
                continue
            yield relative, path.read_text(encoding="utf-8")
