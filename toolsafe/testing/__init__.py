"""What users need to test their own tools and agent code against toolsafe, without
Redis, PostgreSQL or a worker (as ``celery.contrib.testing`` and dramatiq's
``StubBroker`` do for theirs); toolsafe's own tests use it first.

    from toolsafe.testing import RecordingHints, ScriptedAdapter, memory_runtime, envelopes
    from toolsafe import Client

    adapter = ScriptedAdapter()
    runtime, store = memory_runtime(adapter)
    hints = RecordingHints()
    client = Client(runtime=runtime, hints=hints)
    view = client.submit(adapter.tool, {"recipient_email": "a@example.com", "amount": 120})
    # hints.take() == [Hint("execute", view.operation_ref)]

- :func:`memory_runtime`: a ``Runtime`` over a fresh in-memory store, with your adapters.
- :class:`RecordingHints`: the pipeline's publisher, recording each hint instead of
  sending it (and, like the Celery publisher, leaving a hint due beyond ``max_eta`` to
  the sweeper).
- :class:`ScriptedAdapter`: a write adapter with a lookup that answers from a script and
  remembers every call.
- :mod:`toolsafe.testing.envelopes`: an envelope of every kind the runtime tells apart.

See docs/testing.md.
"""

from __future__ import annotations

from toolsafe.testing import envelopes
from toolsafe.testing.runtime import (
    SCRIPTED_TOOL,
    Hint,
    InvoiceInput,
    RecordingHints,
    Script,
    ScriptedAdapter,
    memory_runtime,
)

__all__ = [
    "SCRIPTED_TOOL",
    "Hint",
    "InvoiceInput",
    "RecordingHints",
    "Script",
    "ScriptedAdapter",
    "envelopes",
    "memory_runtime",
]
