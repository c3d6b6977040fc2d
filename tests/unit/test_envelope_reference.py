"""docs/envelope-reference.md agrees with every catalogue of codes: envelope and lookup
codes, the runtime's reasons and refusals, the no-op reasons."""

from __future__ import annotations

from pathlib import Path

from toolsafe import reference
from toolsafe.adapters.codes import CATALOGUE
from toolsafe.adapters.lookup_codes import LOOKUP_CODES
from toolsafe.recovery.reasons import NOOP_REASONS, REASONS, REFUSALS

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "envelope-reference.md"


def _summary_rows(text: str) -> dict[str, list[str]]:
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith("| [`"):
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            code = cells[0].split("`")[1]
            rows[code] = cells[1:]
    return rows


def test_doc_is_what_the_generator_renders() -> None:
    assert DOC.read_text(encoding="utf-8") == reference.render(), (
        "docs/envelope-reference.md is stale: run "
        "`python -m toolsafe.reference > docs/envelope-reference.md`"
    )


def test_every_catalogue_code_is_documented_with_its_classification() -> None:
    rows = _summary_rows(DOC.read_text(encoding="utf-8"))
    assert set(rows) == set(CATALOGUE)
    for code, spec in CATALOGUE.items():
        assert rows[code] == [
            spec.category,
            spec.commit_state,
            spec.directive,
            spec.next_action,
            str(spec.max_attempts_remaining),
        ], code


def test_every_reason_refusal_and_pipeline_code_is_documented() -> None:
    from toolsafe.tasks.pipeline import UNKNOWN_TOOL

    text = DOC.read_text(encoding="utf-8")
    for code in (*REASONS, *REFUSALS, UNKNOWN_TOOL):
        assert f"| `{code}` |" in text, code


def test_every_lookup_code_and_no_op_reason_is_documented_with_its_meaning() -> None:
    text = DOC.read_text(encoding="utf-8")
    for catalogue in (LOOKUP_CODES, NOOP_REASONS, REASONS, REFUSALS):
        for code, meaning in catalogue.items():
            assert f"| `{code}` | {meaning.replace('|', chr(92) + '|')} |" in text, code
