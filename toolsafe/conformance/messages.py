"""What the kit says when a scenario fails: the mistake, by name, and the fix. One place,
so that the table, the JSON report and the docs use the same words."""

from __future__ import annotations

from typing import Final

from toolsafe.adapters.sending import KeyPlace

NO_EVIDENCE: Final = (
    "unknown → verify_operation: an answer that names no stored record (a 202, a queued "
    "job) is no evidence that the write happened"
)
NOT_FOUND_404: Final = (
    " — a 404 from a missing route or a proxy read as absent: the runtime would take the "
    "write as never done and send it again. Fix: declare the service's own 404 shape "
    "(lookup_not_found_codes = {...} for the HTTP toolkit; in a lookup function, return "
    "None only for it and raise otherwise)"
)
KEY_UNSEEN: Final = (
    "the kit cannot see this adapter's requests (a @tool function: declare "
    "idempotency_place= and a target in its AdapterSettings)"
)
CANNOT_COUNT: Final = "the lookup cannot count effects (a list lookup or lookup_count_field can)"
TWICE: Final = (
    " — the retry wrote a second record. Either the operation_ref does not reach the "
    "downstream as its idempotency key, or the downstream ignores it; send the operation_ref "
    "as the key, and declare where (idempotency_place=) so the kit can tell which"
)
NONE_FOUND: Final = (
    " — the lookup finds no record under the operation_ref although the write went through: "
    "the lookup and the write do not agree on the key"
)
_FIXES: Final = {
    "delivered": (
        " — a timeout or a lost connection after the request was sent must be unknown "
        "(verify_operation): the write may have happened. Fix: leave the exception out of "
        "errors= (or map it to OUTCOME_UNKNOWN); in the HTTP toolkit, do not catch it before "
        "classify_exception"
    ),
    "ambiguous": (
        " — the client cannot know whether the service saw the request: unknown, never "
        "not_committed"
    ),
    "no_evidence": (
        " — a success needs evidence of a stored record. Fix: treat 202 and queued answers "
        "as OUTCOME_UNKNOWN (the toolkit does; do not override it into a success), and let "
        "the lookup confirm the record"
    ),
}


def fix_for(kind: str, writes: bool) -> str:
    """The fix to append to a failed row of this kind of fault ('' when none applies)."""
    return _FIXES.get(kind, "") if writes else ""


def key_lost(found: str, place: KeyPlace) -> str:
    return (
        f"the operation_ref did not reach the downstream: {found}. The service cannot "
        f"de-duplicate a retry, and the lookup cannot find the write. Fix: send the "
        f"operation_ref in {place} (HttpSettings.idempotency_header for the toolkit's "
        f"header), or declare where it goes (idempotency_place=)"
    )


def uncounted(found: str) -> str:
    return (
        f"not counted: the operation_ref never reached the downstream ({found}), so the "
        f"service holds these writes under no key the lookup can find"
    )


def key_ignored(place: KeyPlace) -> str:
    return (
        f" — the downstream ignores the key: {place} carried the operation_ref and the "
        f"same request stored a second record. Not an adapter failure. What toolsafe still "
        f"guarantees: an unknown outcome is looked up before anything is sent again, and "
        f"sent again only when the lookup finds nothing after consistency_window, so keep "
        f"the lookup and a window that covers its lag. What the adapter could add: look "
        f"the operation_ref up before sending (a check-then-write in execute), or send it "
        f"in a field the service does de-duplicate on"
    )


def key_not_deduplicated(place: KeyPlace) -> str:
    return (
        f" — the adapter declares deduplicates_by_key, but the downstream ignores the key: "
        f"{place} carried the operation_ref and the same request stored a second record. "
        f"With the trait the runtime sends a killed call again one consistency_window "
        f"after its send, and a late request of the killed call would be a second effect. "
        f"Fix: drop deduplicates_by_key, or point the adapter at a service that enforces "
        f"the key"
    )


def declared_after(raised: type[BaseException], why: str) -> str:
    return (
        f"unknown → verify_operation: {raised.__name__} can follow a sent request ({why}); "
        f"never not_committed"
    )


def declared_unjudged(raised: type[BaseException]) -> str:
    return (
        f"not a success; as errors= declares it ({raised.__name__} is not a timeout or a "
        f"lost connection by its class: mark it after_send() if it can be raised after "
        f"the request left)"
    )


def free_text(fields: list[str]) -> str:
    return (
        f"free text in {', '.join(sorted(fields)[:5])} and no result_model: the text is "
        f"cleaned, but its shape is not checked. Declare result_model (a pydantic model of "
        f"the fields you expect) so that anything else is dropped before it is stored"
    )


__all__ = [
    "CANNOT_COUNT",
    "KEY_UNSEEN",
    "NONE_FOUND",
    "NOT_FOUND_404",
    "NO_EVIDENCE",
    "TWICE",
    "declared_after",
    "declared_unjudged",
    "fix_for",
    "free_text",
    "key_ignored",
    "key_lost",
    "uncounted",
]
