"""A corpus of hostile and benign success results, and the figures the success path's
cleaning gets on it: leaks per hostile category (the target is 0) and benign fields
altered (the target is at most 1 %).

``python -m tests.support.redaction_corpus`` prints them (``docs/redaction.md``).
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from tests.support.redaction_corpus.benign import DECLARED_HOSTS, RECORDS
from tests.support.redaction_corpus.hostile import CATEGORIES
from toolsafe.adapters.results import MARK_INSTRUCTIONS, clean_result

# Categories whose every sample is an instruction to a model: the field must be
# withheld whole, whatever form the text took.
WITHHELD_WHOLE = frozenset(
    {"homoglyph_instructions"} | {name for name in CATEGORIES if name.startswith("instructions_")}
)


_MARKER = re.compile(r"\[(?:REMOVED|REDACTED):[a-z_+]+\]")


@dataclass(frozen=True)
class Leak:
    category: str
    text: str
    shown: str


def _shown(text: str) -> str:
    cleaned, _ = clean_result({"id": "rec_1", "note": text}, hosts=DECLARED_HOSTS)
    assert isinstance(cleaned, dict)
    return json.dumps(cleaned["note"], ensure_ascii=False)


def leaks() -> dict[str, list[Leak]]:
    """Per hostile category, the samples whose needles (or a withheld-whole text) came out
    of ``clean_result`` for an adapter without a result model."""
    found: dict[str, list[Leak]] = {}
    for category, samples in CATEGORIES.items():
        found[category] = []
        for text, needles in samples:
            shown = _shown(text)
            note = json.loads(shown)
            if category in WITHHELD_WHOLE:
                leaked = note != MARK_INSTRUCTIONS
            else:
                # A marker's own words ("[REMOVED:instructions]") are no leak.
                rest = _MARKER.sub("", str(note))
                wanted = {
                    n for needle in needles for n in (needle, unicodedata.normalize("NFKC", needle))
                }
                leaked = any(
                    needle in rest or needle in _MARKER.sub("", shown) for needle in wanted
                )
            if leaked:
                found[category].append(Leak(category, text, str(note)))
    return found


def _strings(value: Any, path: str) -> list[tuple[str, str]]:
    if isinstance(value, str):
        return [(path, value)]
    if isinstance(value, dict):
        return [item for key, inner in value.items() for item in _strings(inner, f"{path}.{key}")]
    if isinstance(value, list):
        return [item for i, inner in enumerate(value) for item in _strings(inner, f"{path}[{i}]")]
    return []


def benign_altered() -> tuple[list[tuple[str, str, str]], int]:
    """The benign string fields ``clean_result`` changed (path, before, after), and how many
    string fields there were."""
    altered: list[tuple[str, str, str]] = []
    total = 0
    for kind, records in RECORDS.items():
        for index, record in enumerate(records):
            cleaned, _ = clean_result(record, hosts=DECLARED_HOSTS)
            before = dict(_strings(record, f"{kind}[{index}]"))
            after = dict(_strings(cleaned, f"{kind}[{index}]"))
            total += len(before)
            altered += [
                (path, text, after.get(path, "<dropped>"))
                for path, text in before.items()
                if after.get(path) != text
            ]
    return altered, total


def main() -> None:
    found = leaks()
    print(f"{'category':<28} {'samples':>7} {'leaks':>5}")
    for category, samples in CATEGORIES.items():
        print(f"{category:<28} {len(samples):>7} {len(found[category]):>5}")
        for leak in found[category]:
            print(f"    leaked: {leak.text!r} -> {leak.shown!r}")
    total = sum(len(samples) for samples in CATEGORIES.values())
    print(f"{'all hostile':<28} {total:>7} {sum(len(v) for v in found.values()):>5}")
    altered, fields = benign_altered()
    records = sum(len(r) for r in RECORDS.values())
    print(f"benign: {records} records, {fields} string fields, {len(altered)} altered "
          f"({100 * len(altered) / fields:.2f} %)")  # fmt: skip
    for path, before, after in altered:
        print(f"    altered {path}: {before!r} -> {after!r}")
