"""A success result is upstream text too: it passes the adapter's result model, and every
string in it is cleaned, capped and scanned before anything stores or shows it.

What fails is replaced by a neutral marker (never shown half-redacted) and listed as a
:class:`Redaction`, which the runtime records in the step's events (paths and kinds only).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel, JsonValue, ValidationError

from toolsafe.adapters.redaction import clean_text, find_secrets, looks_like_instructions
from toolsafe.adapters.untrusted import Neutralised, inspect, normalise

MAX_RESULT_TEXT: Final = 1_000
"""Characters kept of one string in a result."""
MAX_RESULT_ITEMS: Final = 200
"""Entries kept of one list or object."""
MAX_RESULT_DEPTH: Final = 8
MAX_REDACTIONS: Final = 50

MARK_INSTRUCTIONS: Final = "[REMOVED:instructions]"

# Keys of a result without a model are upstream text as well: plain identifiers only.
_KEY: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$")
_HIDDEN: Final = frozenset({"Cc", "Cf", "Co", "Cs", "Cn"})


@dataclass(frozen=True)
class Redaction:
    """One part of a result that was replaced or cut: where (``result.note``) and why
    (``instructions``, ``secret_jwt``, ``control_characters``, ``too_long``, ``key``,
    ``too_large``, ``too_deep``, ``number``, ``result_model``; markup neutralised in a
    string that stays: ``image``, ``link``, ``html_comment``, ``html_element``,
    ``html_attribute``)."""

    path: str
    kind: str

    def as_json(self) -> dict[str, str]:
        return {"path": self.path, "kind": self.kind}


def declared_hosts(hosts: Iterable[str]) -> frozenset[str]:
    """Host names as links are checked against: lower case, no leading ``*.`` or dot."""
    return frozenset(
        name.strip().casefold().removeprefix("*.").strip(".") for name in hosts if name.strip()
    )


class _Cleaner:
    def __init__(self, hosts: frozenset[str] = frozenset()) -> None:
        self.found: list[Redaction] = []
        self.hosts = hosts

    def note(self, path: str, kind: str) -> None:
        if len(self.found) < MAX_REDACTIONS:
            self.found.append(Redaction(path, kind))

    def text(self, value: str, path: str) -> str:
        plain = value.isascii() and value.isprintable()
        if not plain and any(
            unicodedata.category(char) in _HIDDEN and char not in "\t\n" for char in value
        ):
            self.note(path, "control_characters")
        cleaned = normalise(value, MAX_RESULT_TEXT)
        if len(value) > MAX_RESULT_TEXT * 2 or len(cleaned) >= MAX_RESULT_TEXT:
            self.note(path, "too_long")
        if "<" in cleaned or "[" in cleaned:
            neutral = Neutralised(cleaned, self.hosts)
            for kind in neutral.kinds:
                self.note(path, kind)
            cleaned = neutral.text
        instructions, secrets = inspect(cleaned, email_domains=self.hosts)
        if instructions:
            self.note(path, "instructions")
            return MARK_INSTRUCTIONS
        if secrets:
            # No "secret:" here: the log filter would read that as a credential itself.
            self.note(path, "secret_" + "+".join(secrets))
            return f"[REDACTED:{secrets[0]}]"
        return cleaned

    def value(self, value: Any, path: str, depth: int) -> JsonValue:
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, int):
            if abs(value) < 10**15:
                return value
            self.note(path, "number")
            return None
        if isinstance(value, float):
            if math.isfinite(value):
                return value
            self.note(path, "number")
            return None
        if isinstance(value, str):
            return self.text(value, path)
        if depth >= MAX_RESULT_DEPTH:
            self.note(path, "too_deep")
            return None
        if isinstance(value, dict):
            kept: dict[str, JsonValue] = {}
            for index, (key, item) in enumerate(value.items()):
                if index >= MAX_RESULT_ITEMS:
                    self.note(path, "too_large")
                    break
                name = key if isinstance(key, str) else str(key)
                shown_key = clean_text(name, 64)
                if (
                    not _KEY.fullmatch(name)
                    or looks_like_instructions(shown_key)
                    # No secret shape fits in an identifier under 12 characters (the
                    # shortest, an SSN, needs dashes and a digit first): a step's usual
                    # keys skip the scan.
                    or (len(name) >= 12 and find_secrets(shown_key))
                ):
                    self.note(f"{path}.*", "key")
                    continue
                kept[name] = self.value(item, f"{path}.{name}", depth + 1)
            return kept
        if isinstance(value, list | tuple):
            if len(value) > MAX_RESULT_ITEMS:
                self.note(path, "too_large")
            return [
                self.value(item, f"{path}[{index}]", depth + 1)
                for index, item in enumerate(value[:MAX_RESULT_ITEMS])
            ]
        self.note(path, "not_json")
        return None


def clean_result(
    result: Any, model: type[BaseModel] | None = None, *, hosts: Iterable[str] = ()
) -> tuple[JsonValue, tuple[Redaction, ...]]:
    """``result`` through ``model`` (unknown keys dropped, types checked; a result that
    does not fit becomes ``None``), then every string cleaned and scanned. Markdown and
    HTML links and images keep their target only on ``hosts`` (and their subdomains)."""
    cleaner = _Cleaner(declared_hosts(hosts))
    if model is not None and result is not None:
        fitted = _fit(result, model, cleaner)
        if fitted is None:
            cleaner.note("result", "result_model")
            return None, tuple(cleaner.found)
        result = fitted
    cleaned = cleaner.value(result, "result", 0)
    return cleaned, tuple(cleaner.found)


def _fit(result: Any, model: type[BaseModel], cleaner: _Cleaner) -> dict[str, Any] | None:
    """The result as ``model`` reads it; top-level fields that do not fit are dropped
    (and noted), so one bad field does not cost the rest. None when it cannot fit."""
    candidate = dict(result) if isinstance(result, dict) else result
    for _ in range(MAX_RESULT_ITEMS):
        try:
            parsed = model.model_validate(candidate)
        except ValidationError as error:
            if not isinstance(candidate, dict):
                return None
            bad = {
                item["loc"][0]
                for item in error.errors(include_url=False, include_input=False)
                if item["loc"] and item["type"] != "missing"
            }
            bad = {key for key in bad if key in candidate}
            if not bad:
                return None
            for key in sorted(bad, key=str):
                cleaner.note(f"result.{key}" if _KEY.fullmatch(str(key)) else "result.*",
                             "result_model")  # fmt: skip
                del candidate[key]
            continue
        dumped: dict[str, Any] = parsed.model_dump(mode="json", by_alias=True)
        return dumped
    return None
