"""The article's example envelopes, as named values that tests and docs share: those of
``toolsafe.testing.envelopes``, under the names the tests know."""

from __future__ import annotations

from toolsafe.testing.envelopes import ARTICLE_EXAMPLES as ARTICLE_EXAMPLES
from toolsafe.testing.envelopes import CHECKED_AT as CHECKED_AT
from toolsafe.testing.envelopes import NOT_BEFORE as NOT_BEFORE
from toolsafe.testing.envelopes import REF as OPERATION_REF
from toolsafe.testing.envelopes import dependency_unavailable as dependency_unavailable
from toolsafe.testing.envelopes import invalid_recipient_address as invalid_recipient_address
from toolsafe.testing.envelopes import invoice_created as invoice_created
from toolsafe.testing.envelopes import missing_approval as missing_approval
from toolsafe.testing.envelopes import outcome_unknown as outcome_unknown
from toolsafe.testing.envelopes import version_conflict as version_conflict

__all__ = ["OPERATION_REF"]
