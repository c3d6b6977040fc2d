"""The hostile success corpus and the cleaning rules without a server: variety, clean
strings unchanged, unreadable results, long text, the log guard figure."""

from __future__ import annotations

from tests.services.adapters.test_hostile_success import NoteResult
from tests.support.adapters.hostile_success_corpus import CORPUS, log_guard_figure
from toolsafe.adapters.results import MAX_RESULT_TEXT, clean_result


def test_the_corpus_is_big_and_varied() -> None:
    assert len(CORPUS) >= 60
    assert len({sample.name for sample in CORPUS}) == len(CORPUS)
    kinds = {sample.kind for sample in CORPUS}
    assert kinds == {
        "secret", "customer_data", "injection", "control", "oversized", "key", "shape",
    }  # fmt: skip


def test_clean_strings_pass_unchanged() -> None:
    result = {"id": "inv_1", "note": "Paid in full, thank you.", "amount_cents": 4200}
    assert clean_result(result) == (result, ())


def test_a_result_the_model_cannot_read_becomes_none() -> None:
    cleaned, found = clean_result({"customer_id": "c1"}, NoteResult)  # id missing
    assert cleaned is None and [r.kind for r in found] == ["result_model"]


def test_long_text_is_capped() -> None:
    cleaned, found = clean_result({"id": "x", "note": "word " * 1_000})
    assert isinstance(cleaned, dict) and len(str(cleaned["note"])) <= MAX_RESULT_TEXT
    assert [(r.path, r.kind) for r in found] == [("result.note", "too_long")]


def test_log_guard_figure() -> None:
    removed, total = log_guard_figure()
    # docs/redaction.md reports this figure; it may only go up.
    assert (removed, total) >= (0, len(CORPUS))
    assert removed >= 60, f"the log guard scrubbed only {removed} of {total}"
