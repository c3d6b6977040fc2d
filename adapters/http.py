"""Adapters for HTTP downstreams over httpx: send with the operation_ref as idempotency key,
classify whatever happens by the table of DESIGN §7, look operations up by operation_ref."""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Final, Self

import httpx
from pydantic import JsonValue

from toolsafe.adapters import codes, outgoing, sending, tool_errors
from toolsafe.adapters.envelope import AnySuccess, ToolError, ToolSuccess, Verification
from toolsafe.adapters.http_lookup import HttpLookup, LookupShape
from toolsafe.adapters.http_responses import (
    Observed,
    Sent,
    body_texts,
    error_parts,
    guard_transport_logs,
    observe,
    read_bounded,
    reports_failure,
    reports_pending,
    retry_after_delay,
    snake_case,
    transport_failure,
)
from toolsafe.adapters.protocol import CallContext, InputT
from toolsafe.adapters.redaction import clean_text, looks_like_instructions
from toolsafe.adapters.sending import Declared, KeyPlace, refuse_unknowable

log = logging.getLogger("toolsafe.adapters.http")

_EVIDENCE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/\-]{0,99}$")
_UPSTREAM_CODE: Final = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]{0,62}$")
_MAYBE_SENT: Final = (
    httpx.ReadTimeout,
    httpx.WriteTimeout,
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
)


@dataclass(frozen=True)
class HttpSettings:
    """Where the downstream is and how long to wait for it; every timeout is explicit.
    ``max_attempts`` counts executions per budget (``CallContext.retries_allowed``)."""

    base_url: str
    connect_timeout: float = 3.0
    write_timeout: float = 10.0
    read_timeout: float = 10.0
    pool_timeout: float = 3.0
    max_connections: int = 10
    max_retry_after: timedelta = timedelta(minutes=5)
    default_retry_delay: timedelta = timedelta(seconds=2)
    max_body_bytes: int = 65_536
    max_attempts: int = 5
    idempotency_header: str = "Idempotency-Key"
    approval_header: str = "X-Approval-Ref"
    proxy: str | None = None
    # Off by default: a proxy picked up from the environment would change what "nothing
    # was sent" means without anyone having configured it.
    trust_env: bool = False

    def make_client(self) -> httpx.Client:
        return httpx.Client(
            timeout=httpx.Timeout(
                connect=self.connect_timeout,
                write=self.write_timeout,
                read=self.read_timeout,
                pool=self.pool_timeout,
            ),
            limits=httpx.Limits(max_connections=self.max_connections),
            proxy=self.proxy,
            trust_env=self.trust_env,
            follow_redirects=False,
        )


class HttpAdapter(HttpLookup[InputT]):
    """An adapter whose downstream is one HTTP endpoint (see ``docs/example-service.md``
    for the example). Subclasses set ``tool``, ``writes``, ``input_model``, ``path`` and
    the tables below; ``has_lookup`` adapters also set ``lookup_path`` and, when the
    lookup answers a JSON list, ``lookup_returns = "list"`` (the lookup's half is
    :class:`~toolsafe.adapters.http_lookup.HttpLookup`).
    """

    method: ClassVar[str] = "POST"
    path: ClassVar[str]
    # Upstream error code → catalogue code; any other upstream code is UPSTREAM_ERROR.
    upstream_codes: ClassVar[Mapping[str, str]] = {}
    # Where the record sits in a success body (None: the body itself), which of its
    # fields make the result, and which one is the evidence reference.
    record_key: ClassVar[str | None] = None
    result_fields: ClassVar[tuple[str, ...]] = ()
    evidence_field: ClassVar[str | None] = "id"
    # httpx exception types this adapter's transport raises only before sending: a
    # classify_exception override may then call them not_committed.
    before_send: ClassVar[tuple[type[BaseException], ...]] = ()
    # Where the operation_ref travels (None: the ``idempotency_header`` of the settings);
    # the conformance kit checks that it arrives there.
    idempotency_place: ClassVar[KeyPlace | None] = None

    def __init__(self, settings: HttpSettings, client: httpx.Client | None = None) -> None:
        self.settings = settings
        self._given = client
        self._client: httpx.Client | None = None
        self._pid = 0
        guard_transport_logs()

    @property
    def client(self) -> httpx.Client:
        """The HTTP client, made on first use in each process: adapters are registered
        before Celery's prefork pool forks, and pooled sockets must not be shared."""
        if self._given is not None:
            return self._given
        if self._client is None or self._pid != os.getpid():
            self._client = self.settings.make_client()
            self._pid = os.getpid()
        return self._client

    def close(self) -> None:
        if self._given is not None:
            self._given.close()
        elif self._client is not None and self._pid == os.getpid():
            self._client.close()
            self._client = None

    def rebased(self, base_url: str, **overrides: Any) -> Self:
        """A copy that talks to ``base_url`` (with other settings replaced as given) over
        a client of its own: how the conformance kit puts its proxy in between."""
        twin = copy.copy(self)
        twin.settings = dataclasses.replace(self.settings, base_url=base_url, **overrides)
        twin._given = None
        twin._client = None
        twin._pid = 0
        return twin

    def refuse_contradictions(self) -> None:
        """With ``deduplicates_by_key``: the key is sent, and the downstream's "key in
        flight" 409 maps to ``IDEMPOTENCY_KEY_IN_FLIGHT`` (unknown), never a conflict."""
        super().refuse_contradictions()
        if self.deduplicates_by_key:
            self.key_place()  # a KeyPlace refuses an empty header, field or parameter name
            sending.refuse_in_flight_conflict(self.tool, self.upstream_codes.values())

    def refuse_unknowable(self) -> None:
        """A write's ``classify_exception`` (an override included) must call every httpx
        error that can follow a sent request ``unknown``: probed with each of them at
        registration, since the hook is pure classification."""
        if not self.writes:
            return
        declared = []
        for klass in _MAYBE_SENT:
            if issubclass(klass, self.before_send):
                continue
            envelope = self.classify_exception(klass("probe"), "toolsafe/probe", 1)
            declared.append(Declared(klass, envelope.code, envelope.commit_state))
        where = f"{type(self).__qualname__}.classify_exception"
        refuse_unknowable(self.tool, where, declared, self.before_send)

    # --- what to send --------------------------------------------------------------
    def request_path(self, data: InputT) -> str:
        return self.path

    def request_json(self, data: InputT) -> JsonValue:
        dumped: JsonValue = data.model_dump(mode="json")
        return dumped

    def headers(self, operation_ref: str, context: CallContext) -> dict[str, str]:
        sent = {self.settings.idempotency_header: operation_ref, "Accept": "application/json"}
        if context.approval_ref:
            sent[self.settings.approval_header] = context.approval_ref
        return sent

    def key_place(self) -> KeyPlace:
        """Where this adapter sends the operation_ref as the idempotency key."""
        return self.idempotency_place or KeyPlace("header", self.settings.idempotency_header)

    def _url(self, path: str) -> str:
        return self.settings.base_url.rstrip("/") + path

    def exchange(self, request: httpx.Request) -> Observed:
        """Send ``request`` and read at most ``max_body_bytes`` of the answer (use it in
        an override of :meth:`lookup` or :meth:`execute`); transport errors propagate."""
        sent = outgoing.send(request, self._send)
        return observe(sent, self.settings.max_body_bytes)

    def _send(self, request: httpx.Request) -> httpx.Response:
        return self.client.send(request, stream=True)

    # --- execute -------------------------------------------------------------------
    def execute(
        self, data: InputT, operation_ref: str, context: CallContext
    ) -> AnySuccess | ToolError:
        attempts_left = context.retries_allowed(self.settings.max_attempts)
        try:
            request = self.client.build_request(
                self.method,
                self._url(self.request_path(data)),
                json=self.request_json(data) if self.method != "GET" else None,
                params=self.request_params(data) if self.method == "GET" else None,
                headers=self.headers(operation_ref, context),
            )
            observed = self.exchange(request)
        except (httpx.HTTPError, httpx.InvalidURL) as error:
            failed = self.classify_exception(error, operation_ref, attempts_left)
            log.warning(
                "downstream call failed: %s",
                type(error).__name__,
                extra={"event": "downstream_error", "tool": self.tool, "code": failed.code},
            )
            return failed
        envelope = self.classify_response(observed, operation_ref, attempts_left)
        log.info(
            "downstream answered %s",
            observed.status,
            extra={
                "event": "downstream_response",
                "tool": self.tool,
                "status": observed.status,
                "code": envelope.code if isinstance(envelope, ToolError) else "OK",
            },
        )
        return envelope

    def request_params(self, data: InputT) -> dict[str, str]:
        dumped = data.model_dump(mode="json")
        return {str(k): str(v) for k, v in dumped.items() if v is not None}

    # --- classification ------------------------------------------------------------
    def error(
        self,
        code: str,
        operation_ref: str,
        details: Mapping[str, object] | None = None,
        *,
        not_before: datetime | None = None,
        unknown: bool = False,
        attempts_left: int | None = None,
    ) -> ToolError:
        """A catalogue envelope; an unknown outcome is verified only when there is a lookup."""
        return tool_errors.tool_error(
            self.tool,
            self.has_lookup,
            code,
            operation_ref,
            details,
            not_before=not_before,
            unknown=unknown,
            attempts_left=attempts_left,
        )

    def classify_exception(
        self, error: BaseException, operation_ref: str, attempts_left: int
    ) -> ToolError:
        group = transport_failure(error)
        reason = snake_case(type(error).__name__)
        if group == "client_bug":
            return self.error(codes.CLIENT_REQUEST_INVALID, operation_ref, {"reason": reason})
        if group == "maybe_sent" and self.writes:
            return self.error(codes.OUTCOME_UNKNOWN, operation_ref, {"reason": reason})
        return self.error(
            codes.DEPENDENCY_UNAVAILABLE,
            operation_ref,
            {"reason": reason},
            not_before=datetime.now(UTC) + self.settings.default_retry_delay,
            attempts_left=attempts_left,
        )

    def _not_before(self, observed: Observed) -> tuple[datetime, int] | None:
        delay = retry_after_delay(observed.headers, observed.received_at)
        if delay is None:
            return None
        delay = min(max(delay, timedelta(0)), self.settings.max_retry_after)
        return observed.received_at + delay, math.ceil(delay.total_seconds())

    def classify_response(
        self, observed: Observed, operation_ref: str, attempts_left: int
    ) -> AnySuccess | ToolError:
        status = observed.status
        details: dict[str, object] = {"status": status}
        if 200 <= status < 300:
            body = observed.json_object()
            if body is None:
                return self._unreadable(operation_ref, details)
            if self.body_reports_failure(body):
                return self.parse_failure(body, observed, operation_ref, attempts_left)
            if self.writes and self.body_reports_pending(body, status):
                # Accepted is not stored: nothing proves the record exists yet.
                details["reason"] = "accepted_not_stored"
                return self.error(codes.OUTCOME_UNKNOWN, operation_ref, details)
            return self.parse_success(body, observed, operation_ref)
        waited = self._not_before(observed)
        if status == 429 or (status == 503 and waited is not None):
            code = codes.RATE_LIMITED if status == 429 else codes.DEPENDENCY_UNAVAILABLE
            if waited is None:
                when = observed.received_at + self.settings.default_retry_delay
                seconds = math.ceil(self.settings.default_retry_delay.total_seconds())
            else:
                when, seconds = waited
            details.update(reason=f"http_{status}", retry_after_seconds=seconds)
            return self.error(
                code, operation_ref, details, not_before=when, attempts_left=attempts_left
            )
        if status >= 500:
            details["reason"] = f"http_{status}"
            if self.writes:
                return self.error(codes.OUTCOME_UNKNOWN, operation_ref, details)
            return self.error(
                codes.DEPENDENCY_UNAVAILABLE,
                operation_ref,
                details,
                not_before=observed.received_at + self.settings.default_retry_delay,
                attempts_left=attempts_left,
            )
        if 400 <= status < 500:
            body = observed.json_object() or {}
            return self.body_error(body, observed, operation_ref, attempts_left, success=False)
        # 1xx/3xx: not an answer this client asked for; a write may still have happened.
        return self.error(codes.UPSTREAM_ERROR, operation_ref, details, unknown=self.writes)

    def body_reports_failure(self, body: Mapping[str, Any]) -> bool:
        """Whether a 2xx body says the operation failed (the legacy "200 with an error"):
        ``ok``/``success`` false, an ``error``, or a ``status`` of error/failed. Override
        for a downstream that says it otherwise (``{"result": "DECLINED"}``)."""
        return reports_failure(body)

    def body_reports_pending(self, body: Mapping[str, Any], status: int) -> bool:
        """Whether a 2xx to a write says the work was only accepted, not done: a 202, or
        a ``status`` of queued/pending/accepted/processing/scheduled. Such a write is
        ``unknown`` and verified by lookup, never a success."""
        return status == 202 or reports_pending(body)

    def parse_failure(
        self, body: Mapping[str, Any], observed: Observed, operation_ref: str, attempts_left: int
    ) -> ToolError:
        """The envelope of a 2xx that reports failure: by the code table, and ``unknown``
        on a write when the code is not one the table knows."""
        return self.body_error(body, observed, operation_ref, attempts_left, success=True)

    def upstream_error(self, body: Mapping[str, Any]) -> tuple[str | None, list[str]]:
        """The upstream code and field names of an error body (see ``error_parts``);
        override for another shape. Nothing else of the body is ever read."""
        return error_parts(body)

    def _unreadable(self, operation_ref: str, details: Mapping[str, object]) -> ToolError:
        if self.writes:
            return self.error(codes.UNREADABLE_RESPONSE, operation_ref, details)
        return self.error(codes.UPSTREAM_ERROR, operation_ref, details)

    def _input_fields(self, names: list[str]) -> list[str]:
        # Only names of our own input model: a field name is upstream text too.
        known = set(self.input_model.model_fields)
        return sorted({clean_text(name, 40) for name in names} & known)

    def body_error(
        self,
        body: Mapping[str, Any],
        observed: Observed,
        operation_ref: str,
        attempts_left: int,
        *,
        success: bool,
    ) -> ToolError:
        """Classify an error body (a 4xx, or a 2xx that reports failure) by the adapter's
        code table; anything unknown or instruction-like becomes ``UPSTREAM_ERROR``."""
        status = observed.status
        details: dict[str, object] = {"status": status}
        # A 2xx that says "failed" in words we do not know may still have been written.
        doubtful = success and self.writes
        # Decoded JSON strings when the body is JSON (escapes resolved), the raw text
        # otherwise; scanning both would double the cost for nothing.
        parsed = observed.json_object()
        texts = body_texts(parsed) if parsed is not None else [observed.text()]
        if any(looks_like_instructions(text) for text in texts):
            log.warning(
                "downstream error text looks like instructions; withheld",
                extra={"event": "upstream_instructions", "tool": self.tool, "status": status},
            )
            return self.error(codes.UPSTREAM_ERROR, operation_ref, details, unknown=doubtful)
        upstream, names = self.upstream_error(body)
        fields = self._input_fields(names)
        if fields:
            details["fields"] = ", ".join(fields)
            if len(fields) == 1:
                details["field"] = fields[0]
        if upstream is not None:
            mapped = (
                self.upstream_codes.get(upstream) if _UPSTREAM_CODE.fullmatch(upstream) else None
            )
            if mapped is None:
                return self.error(codes.UPSTREAM_ERROR, operation_ref, details, unknown=doubtful)
            spec = codes.spec_for(mapped)
            when = None
            if spec.directive == "after_delay":
                waited = self._not_before(observed)
                when = (waited[0] if waited else None) or (
                    observed.received_at + self.settings.default_retry_delay
                )
            return self.error(
                mapped, operation_ref, details, not_before=when, attempts_left=attempts_left
            )
        if success:
            return self.error(codes.UPSTREAM_ERROR, operation_ref, details, unknown=doubtful)
        if status in (400, 422):
            code = codes.UPSTREAM_VALIDATION_FAILED if fields else codes.REQUEST_REJECTED
            return self.error(code, operation_ref, details)
        if status in (401, 403):
            return self.error(codes.NOT_AUTHORIZED, operation_ref, details)
        if status == 409:
            return self.error(codes.CONFLICT, operation_ref, details)
        return self.error(codes.UPSTREAM_ERROR, operation_ref, details)

    # --- success and lookup --------------------------------------------------------
    def extract_record(self, body: Mapping[str, Any]) -> tuple[dict[str, JsonValue], str | None]:
        """The allow-listed result fields and the evidence reference. The values are
        upstream text still: the guard passes them through ``result_model`` and cleans
        every string (``toolsafe.adapters.results``) before anything stores them."""
        record = body.get(self.record_key) if self.record_key else body
        if not isinstance(record, Mapping):
            return {}, None
        return self.record_fields(record)

    def record_fields(self, record: Mapping[str, Any]) -> tuple[dict[str, JsonValue], str | None]:
        """The allow-listed ``result_fields`` of one record and its ``evidence_field``."""
        result: dict[str, JsonValue] = {}
        for name in self.result_fields:
            if name not in record:
                continue
            value = record[name]
            if isinstance(value, float):
                result[name] = value if math.isfinite(value) else None
            elif value is None or isinstance(value, str | bool | int | list | dict):
                result[name] = value
        evidence = record.get(self.evidence_field) if self.evidence_field else None
        if isinstance(evidence, int) and not isinstance(evidence, bool):
            evidence = str(evidence)
        if not isinstance(evidence, str) or not _EVIDENCE.fullmatch(evidence):
            evidence = None
        return result, evidence

    def parse_success(
        self, body: Mapping[str, Any], observed: Observed, operation_ref: str
    ) -> AnySuccess | ToolError:
        """The body parser of a 2xx that does not report failure. A write needs evidence:
        without it the outcome is verified by lookup instead of assumed."""
        result, evidence = self.extract_record(body)
        if self.writes and evidence is None:
            return self._unreadable(operation_ref, {"status": observed.status})
        return ToolSuccess[JsonValue](
            operation_ref=operation_ref,
            result=result,
            verification=Verification(checked_at=observed.received_at, evidence_ref=evidence),
        )


class HttpWriteAdapter(HttpAdapter[InputT]):
    """A write: maybe-sent failures are ``unknown`` and get verified (or escalated)."""

    writes: ClassVar[bool] = True


class HttpReadAdapter(HttpAdapter[InputT]):
    """A read (the smaller contract): every dependency failure simply waits and retries."""

    writes: ClassVar[bool] = False
    method: ClassVar[str] = "GET"
    evidence_field: ClassVar[str | None] = None


__all__ = [
    "HttpAdapter",
    "HttpReadAdapter",
    "HttpSettings",
    "HttpWriteAdapter",
    "LookupShape",
    "Observed",
    "Sent",
    "body_texts",
    "error_parts",
    "guard_transport_logs",
    "observe",
    "read_bounded",
    "reports_failure",
    "retry_after_delay",
    "transport_failure",
]
