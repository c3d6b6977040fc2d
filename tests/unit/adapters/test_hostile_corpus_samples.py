"""The hostile corpus itself is big and varied, and the log filter scrubs every sample."""

from __future__ import annotations

import logging

import pytest

from tests.services.adapters.test_hostile_corpus import MARKERS, hidden_needles
from tests.support.adapters.hostile_corpus import CORPUS, Sample
from toolsafe.adapters.redaction import RedactingFilter
from toolsafe.adapters.results import MARK_INSTRUCTIONS


def test_the_corpus_is_big_and_varied() -> None:
    kinds = {sample.kind for sample in CORPUS}
    assert len(CORPUS) >= 60
    assert kinds == {"secret", "injection", "html", "trace", "oversized", "control", "lookalike"}


@pytest.mark.parametrize(
    "sample",
    [s for s in CORPUS if s.kind in ("secret", "injection", "control")],
    ids=[s.name for s in CORPUS if s.kind in ("secret", "injection", "control")],
)
def test_log_filter_scrubs_messages_arguments_extras_and_tracebacks(
    sample: Sample, caplog: pytest.LogCaptureFixture
) -> None:
    logger = logging.getLogger("toolsafe.test.hostile")
    caplog.handler.addFilter(RedactingFilter())
    caplog.set_level(logging.DEBUG, logger=logger.name)
    logger.error("upstream said %s", sample.text, extra={"upstream": sample.text})
    try:
        raise ValueError(sample.text)
    except ValueError:
        logger.exception("while calling the downstream")
    logged = caplog.text + " ".join(str(getattr(r, "upstream", "")) for r in caplog.records)
    # The filter keeps harmless words; of a control sample only the characters must go.
    needles = hidden_needles(sample) if sample.kind == "control" else sample.all_needles()
    assert not [needle for needle in needles if needle in logged]
    # What was scrubbed says so; the harmless message around it stays, whatever the kind.
    if sample.kind != "control":
        assert MARKERS[0] in logged or MARK_INSTRUCTIONS in logged, logged
    assert "while calling the downstream" in caplog.text
