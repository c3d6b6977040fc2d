"""Error fingerprints for the loop guard: the same error on the same input, seen again."""

from __future__ import annotations

import hashlib

from toolsafe.adapters.envelope import ToolError, flagged_fields
from toolsafe.recovery.canonical import canonical_json


def error_fingerprint(envelope: ToolError, input_hash: str) -> str:
    """A stable hash of (code, category, flagged fields, input hash).

    Messages and other details are left out on purpose: they may vary between two
    occurrences of what is, for the loop guard, the same failure.
    """
    payload = {
        "code": envelope.code,
        "category": envelope.category,
        "fields": list(flagged_fields(envelope)),
        "input_hash": input_hash,
    }
    digest = hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()
    return f"fp:{digest[:32]}"
