"""The unit tests' names for toolsafe.testing's doubles (the scripted adapter, the
recording publisher, the memory runtime, the envelopes) and the input they submit."""

from __future__ import annotations

from typing import Any

from toolsafe.settings import Settings
from toolsafe.testing import SCRIPTED_TOOL as TOOL
from toolsafe.testing import Hint as Hint
from toolsafe.testing import InvoiceInput as InvoiceInput
from toolsafe.testing import RecordingHints as RecordingHints
from toolsafe.testing import Script as Script
from toolsafe.testing import ScriptedAdapter as ScriptedAdapter
from toolsafe.testing import memory_runtime as memory_runtime
from toolsafe.testing.envelopes import conflict as conflict
from toolsafe.testing.envelopes import correct_input as correct_input
from toolsafe.testing.envelopes import needs_approval as needs_approval
from toolsafe.testing.envelopes import now as now
from toolsafe.testing.envelopes import retry_in as retry_in
from toolsafe.testing.envelopes import success as success
from toolsafe.testing.envelopes import unknown as unknown

__all__ = ["TOOL"]

INPUT: dict[str, Any] = {"recipient_email": "a@example.com", "amount": 120}
SETTINGS = Settings()
