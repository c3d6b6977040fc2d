"""The lookup half of the HTTP toolkit: how an :class:`~toolsafe.adapters.http.HttpAdapter`
asks the downstream whether an operation happened (``GET lookup_path`` by operation_ref),
reads the answer as found, not found or unavailable, and counts a ref's records for the
conformance kit. A lookup that cannot be read never says "not there" (DESIGN §7)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar, Literal
from urllib.parse import quote

import httpx
from pydantic import JsonValue

from toolsafe.adapters import lookup_codes
from toolsafe.adapters.http_responses import Observed
from toolsafe.adapters.protocol import (
    Adapter,
    InputT,
    LookupFound,
    LookupNotFound,
    LookupResult,
    LookupUnavailable,
)

log = logging.getLogger("toolsafe.adapters.http")

LookupShape = Literal["object", "list"]


class HttpLookup(Adapter[InputT]):
    """The lookup's declarations and their reading; ``HttpAdapter`` supplies the
    transport and the body hooks declared at the end (the same ones its execute uses)."""

    path: ClassVar[str]
    # The lookup: GET lookup_path (which may hold "{operation_ref}", the object by path)
    # with ?<lookup_param>=<operation_ref> (None: no query parameter).
    lookup_path: ClassVar[str | None] = None
    lookup_param: ClassVar[str | None] = "operation_ref"
    # "object": a 200 object (the record at record_key) is found, a 404 not found.
    # "list": a JSON list (at lookup_list_key, None: the body itself) filtered by the
    # query parameter; [] is not found, a matching item is found.
    lookup_returns: ClassVar[LookupShape] = "object"
    lookup_list_key: ClassVar[str | None] = None
    # Items whose field of this name holds another operation_ref are not ours; a list of
    # only such items means the filter was ignored, which is "unavailable", not "absent".
    lookup_match_field: ClassVar[str | None] = "operation_ref"
    # Where an object lookup says how many records the downstream holds for the ref.
    lookup_count_field: ClassVar[str | None] = None
    # A 404 from the lookup counts as "not found" only when it carries one of these codes
    # (None: any 404 for an object lookup, none for a list lookup, whose absent is []):
    # a misrouted lookup must not pass for "the write never happened".
    lookup_not_found_codes: ClassVar[frozenset[str] | None] = None

    def lookup_request(self, operation_ref: str) -> httpx.Request:
        """``GET lookup_path`` (``{operation_ref}`` in it filled in, URL-quoted) with
        ``?<lookup_param>=<operation_ref>`` unless ``lookup_param`` is None."""
        path = self.lookup_path or self.path
        if "{operation_ref}" in path:
            path = path.replace("{operation_ref}", quote(operation_ref, safe=""))
        return self.client.build_request(
            "GET",
            self._url(path),
            params={self.lookup_param: operation_ref} if self.lookup_param else None,
            headers={"Accept": "application/json"},
        )

    def lookup(self, operation_ref: str) -> LookupResult:
        """Send :meth:`lookup_request` and read the answer with :meth:`parse_lookup`;
        no answer at all is unavailable."""
        try:
            observed = self.exchange(self.lookup_request(operation_ref))
        except (httpx.HTTPError, httpx.InvalidURL) as error:
            log.warning(
                "lookup failed: %s",
                type(error).__name__,
                extra={"event": "lookup_error", "tool": self.tool},
            )
            return LookupUnavailable(
                checked_at=datetime.now(UTC), code=lookup_codes.LOOKUP_UNREACHABLE
            )
        return self.parse_lookup(observed, operation_ref)

    def parse_lookup(self, observed: Observed, operation_ref: str) -> LookupResult:
        """404 (with a not-found code) → not found; a 2xx in the ``lookup_returns`` shape
        → found with evidence, or not found for an empty list; anything else is
        unavailable: a lookup that cannot be read never says "not there". An unavailable
        answer carries its ``Retry-After`` (clamped to ``max_retry_after``) for the
        runtime to honour."""
        now = observed.received_at
        if observed.status == 404:
            upstream, _ = self.upstream_error(observed.json_object() or {})
            declared = self.lookup_not_found_codes
            # A list lookup says "absent" with []: its 404 is a missing route or a
            # proxy's, unless the service's own 404 shape is declared.
            if declared is None and self.lookup_returns == "object":
                return LookupNotFound(checked_at=now)
            if declared is not None and upstream in declared:
                return LookupNotFound(checked_at=now)
            return LookupUnavailable(checked_at=now, code=lookup_codes.LOOKUP_UNEXPECTED_404)
        if not 200 <= observed.status < 300:
            asked = self._not_before(observed)  # a 503's (or 429's) Retry-After, clamped
            return LookupUnavailable(
                checked_at=now,
                code=lookup_codes.lookup_http(observed.status),
                retry_after=None if asked is None else asked[0] - observed.received_at,
            )
        if self.lookup_returns == "list":
            items = self.lookup_items(observed)
            if items is None:
                return LookupUnavailable(checked_at=now, code=lookup_codes.LOOKUP_UNREADABLE)
            ours = self._ours(items, operation_ref)
            if ours is None:
                return LookupUnavailable(checked_at=now, code=lookup_codes.LOOKUP_FILTER_IGNORED)
            if not ours:
                return LookupNotFound(checked_at=now)
            result, evidence = self.record_fields(ours[0])
        else:
            body = observed.json_object()
            if body is None or self.body_reports_failure(body):
                return LookupUnavailable(checked_at=now, code=lookup_codes.LOOKUP_UNREADABLE)
            result, evidence = self.extract_record(body)
        if evidence is None:
            return LookupUnavailable(checked_at=now, code=lookup_codes.LOOKUP_UNREADABLE)
        return LookupFound(checked_at=now, result=result, evidence_ref=evidence)

    def lookup_items(self, observed: Observed) -> list[Mapping[str, Any]] | None:
        """The records of a list lookup: the JSON list (at ``lookup_list_key``), or None
        when the body is not such a list of objects."""
        value = observed.json_value()
        if self.lookup_list_key is not None:
            if isinstance(value, Mapping) and self.body_reports_failure(value):
                return None
            value = value.get(self.lookup_list_key) if isinstance(value, Mapping) else None
        if not isinstance(value, list) or not all(isinstance(item, Mapping) for item in value):
            return None
        return value

    def _ours(
        self, items: list[Mapping[str, Any]], operation_ref: str
    ) -> list[Mapping[str, Any]] | None:
        if self.lookup_match_field is None:
            return items
        field = self.lookup_match_field
        ours = [item for item in items if item.get(field, operation_ref) == operation_ref]
        return None if items and not ours else ours

    def count_effects(self, operation_ref: str) -> int | None:
        """How many records the downstream holds for ``operation_ref``, when its lookup
        says so (a list lookup, or ``lookup_count_field``); None when it cannot tell."""
        if not self.has_lookup:
            return None
        try:
            observed = self.exchange(self.lookup_request(operation_ref))
        except (httpx.HTTPError, httpx.InvalidURL):
            return None
        found = self.parse_lookup(observed, operation_ref)
        if isinstance(found, LookupNotFound):
            return 0
        if not isinstance(found, LookupFound):
            return None
        if self.lookup_returns == "list":
            items = self.lookup_items(observed)
            ours = self._ours(items or [], operation_ref)
            return len(ours) if ours is not None else None
        body = observed.json_object() or {}
        count = body.get(self.lookup_count_field) if self.lookup_count_field else None
        if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
            return count
        return None

    # --- supplied by HttpAdapter ------------------------------------------------------
    @property
    def client(self) -> httpx.Client:
        raise NotImplementedError

    def _url(self, path: str) -> str:
        raise NotImplementedError

    def exchange(self, request: httpx.Request) -> Observed:
        raise NotImplementedError

    def _not_before(self, observed: Observed) -> tuple[datetime, int] | None:
        raise NotImplementedError

    def body_reports_failure(self, body: Mapping[str, Any]) -> bool:
        raise NotImplementedError

    def upstream_error(self, body: Mapping[str, Any]) -> tuple[str | None, list[str]]:
        raise NotImplementedError

    def extract_record(self, body: Mapping[str, Any]) -> tuple[dict[str, JsonValue], str | None]:
        raise NotImplementedError

    def record_fields(self, record: Mapping[str, Any]) -> tuple[dict[str, JsonValue], str | None]:
        raise NotImplementedError
