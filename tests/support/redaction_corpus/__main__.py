"""``python -m tests.support.redaction_corpus``: the figures, per category."""

from tests.support.redaction_corpus import main

main()
