"""The adapter around a plain function (made by ``toolsafe.adapters.decorators``): its
exceptions classified by a declared table, where on a write anything not in the table is
``unknown``; its return value read as the result with evidence; its lookup function."""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Final, TypeAlias, cast

from pydantic import BaseModel, JsonValue, TypeAdapter

from toolsafe.adapters import codes, lookup_codes, tool_errors
from toolsafe.adapters.calls import LOOP, Around, CallTimedOut, Run, run_within
from toolsafe.adapters.envelope import AnySuccess, ToolError, ToolSuccess, Verification
from toolsafe.adapters.http_responses import (
    error_parts,
    parse_retry_after,
    reports_failure,
    reports_pending,
    snake_case,
)
from toolsafe.adapters.protocol import (
    Adapter,
    CallContext,
    LookupFound,
    LookupNotFound,
    LookupResult,
    LookupUnavailable,
)
from toolsafe.adapters.redaction import clean_text
from toolsafe.adapters.sending import Declared, KeyPlace, refuse_unknowable

EVIDENCE_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/\-]{0,99}$")
_RESULT_DEPTH: Final = 6
_RESULT_ITEMS: Final = 256


@dataclass(frozen=True)
class Raised:
    """What one exception type means: a catalogue code, and the input field it flags
    (for a validation code). ``retry_after`` is read from the exception when it has one."""

    code: str
    field: str | None = None

    def __post_init__(self) -> None:
        codes.spec_for(self.code)  # an unknown code is refused at declaration


ErrorTable: TypeAlias = Mapping[type[BaseException], "str | Raised"]


def retry_after_of(error: BaseException, now: datetime) -> timedelta | None:
    """The wait an exception asks for, when it carries one: a ``retry_after`` attribute
    (seconds, a timedelta, an absolute datetime or a header value), or a ``Retry-After``
    header on ``error.headers`` or ``error.response.headers``."""
    value: object = getattr(error, "retry_after", None)
    if value is None:
        for holder in (error, getattr(error, "response", None)):
            headers = getattr(holder, "headers", None)
            if isinstance(headers, Mapping):
                value = _header(headers, "retry-after")
                if value is not None:
                    break
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, timedelta):
        return value
    if isinstance(value, datetime):
        when = value if value.tzinfo else value.replace(tzinfo=UTC)
        return when - now
    if isinstance(value, int | float):
        return timedelta(seconds=value) if math.isfinite(value) else None
    if isinstance(value, str):
        return parse_retry_after(value, now)
    return None


def _header(headers: Mapping[Any, Any], name: str) -> str | None:
    for key, value in headers.items():
        if isinstance(key, str) and key.lower() == name and isinstance(value, str):
            return value
    return None


def clean_result(value: object, depth: int = 0) -> JsonValue:
    """A returned value as JSON whose strings are made safe (upstream text is untrusted)."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return value  # cleaned as untrusted text by the guard (adapters/results.py)
    if depth >= _RESULT_DEPTH:
        return None
    if isinstance(value, Mapping):
        cleaned: dict[str, JsonValue] = {}
        for key, item in list(value.items())[:_RESULT_ITEMS]:
            if isinstance(key, str):
                cleaned[clean_text(key, 64)] = clean_result(item, depth + 1)
        return cleaned
    if isinstance(value, list | tuple):
        return [clean_result(item, depth + 1) for item in value[:_RESULT_ITEMS]]
    return None


def _plain(value: object) -> object:
    """A returned object (model, dataclass, mapping, scalar) as plain JSON data."""
    if value is None or isinstance(value, str | int | float | bool | Mapping | list | tuple):
        return value
    try:
        return TypeAdapter(type(value)).dump_python(value, mode="json")
    except Exception:  # anything pydantic cannot serialise is unreadable, not a crash
        return _UNREADABLE


_UNREADABLE: Final = object()


def _evidence(value: object, source: str | Callable[[Any], object] | None) -> str | None:
    if source is None:
        return None
    if callable(source):
        try:
            found = source(value)
        except Exception:
            return None
    else:
        found = value.get(source) if isinstance(value, Mapping) else getattr(value, source, None)
    if isinstance(found, int) and not isinstance(found, bool):
        found = str(found)
    if isinstance(found, str) and EVIDENCE_PATTERN.fullmatch(found):
        return found
    return None


class FunctionAdapter(Adapter[BaseModel]):
    """An adapter around a plain function; made by :func:`tool` and :func:`read_tool`."""

    errors: ClassVar[Mapping[type[BaseException], str | Raised]] = {}
    absent: ClassVar[tuple[type[BaseException], ...]] = ()
    # Exception types the author declares raised only before anything is sent.
    before_send: ClassVar[tuple[type[BaseException], ...]] = ()
    # Where the function sends the operation_ref (None: not declared); the conformance
    # kit checks that it arrives there when it can see the requests.
    idempotency_place: ClassVar[KeyPlace | None] = None
    upstream_codes: ClassVar[Mapping[str, str]] = {}
    timeout: ClassVar[float | None] = None
    max_retry_after: ClassVar[timedelta] = timedelta(minutes=5)
    default_retry_delay: ClassVar[timedelta] = timedelta(seconds=2)
    max_attempts: ClassVar[int] = 5  # executions per budget: CallContext.retries_allowed

    def __init__(
        self,
        function: Callable[..., object],
        lookup_function: Callable[[str], object] | None = None,
        *,
        model_param: str | None,
        ref_param: str | None,
        context_param: str | None,
        evidence: str | Callable[[Any], object] | None = "id",
        failed: Callable[[Any], bool] | None = None,
        around: Around | None = None,
        around_lookup: Around | None = None,
    ) -> None:
        self.function = function
        self.lookup_function = lookup_function
        self._model_param = model_param
        self._ref_param = ref_param
        self._context_param = context_param
        # Where a returned value (or a looked-up record) holds its evidence reference.
        self.evidence = evidence
        self._failed = failed
        self._around = around
        self._around_lookup = around_lookup
        self.__doc__ = self.description

    def wrapped(
        self,
        around: Around | None = None,
        around_lookup: Around | None = None,
        *,
        timeout: float | None = None,
    ) -> FunctionAdapter:
        """A copy whose calls (and lookups) go through ``around`` (and, given ``timeout``,
        time out sooner): how the conformance kit raises before or after the real call
        without touching the function."""
        klass = type(self)
        if timeout is not None:
            klass = cast(
                type[FunctionAdapter], type(klass.__name__, (klass,), {"timeout": timeout})
            )
        copy = klass(
            self.function,
            self.lookup_function,
            model_param=self._model_param,
            ref_param=self._ref_param,
            context_param=self._context_param,
            evidence=self.evidence,
            failed=self._failed,
            around=around,
            around_lookup=around_lookup,
        )
        return copy

    def refuse_unknowable(self) -> None:
        """A write's ``errors`` table may not map an exception that can follow a sent
        request (a timeout, a connection lost mid-response) to a code that claims to
        know, unless it is declared ``before_send`` (``toolsafe.adapters.sending``)."""
        if not self.writes:
            return
        declared = []
        for raised, entry in self.errors.items():
            code = entry.code if isinstance(entry, Raised) else entry
            declared.append(Declared(raised, code, codes.spec_for(code).commit_state))
        refuse_unknowable(self.tool, "errors=", declared, self.before_send)

    @property
    def ref_param(self) -> str | None:
        """The parameter the operation_ref is passed in (None for a read)."""
        return self._ref_param

    def replaced(
        self, function: Callable[..., object], lookup_function: Callable[[str], object] | None
    ) -> FunctionAdapter:
        """A copy calling ``function`` and ``lookup_function`` in place of its own, under
        the same declaration: how the conformance kit's dry run puts a double behind it."""
        return type(self)(
            function,
            lookup_function,
            model_param=self._model_param,
            ref_param=self._ref_param,
            context_param=self._context_param,
            evidence=self.evidence,
            failed=self._failed,
        )

    # --- calling -------------------------------------------------------------------
    def _arguments(
        self, data: BaseModel, operation_ref: str, context: CallContext
    ) -> dict[str, Any]:
        if self._model_param is not None:
            arguments: dict[str, Any] = {self._model_param: data}
        else:
            arguments = {name: getattr(data, name) for name in type(data).model_fields}
        if self._ref_param is not None:
            arguments[self._ref_param] = operation_ref
        if self._context_param is not None:
            arguments[self._context_param] = context
        return arguments

    @staticmethod
    def _complete(function: Callable[..., object], *args: Any, **kwargs: Any) -> object:
        returned = function(*args, **kwargs)
        if inspect.iscoroutine(returned):
            return LOOP.run(returned)
        return returned

    def execute(
        self, data: BaseModel, operation_ref: str, context: CallContext
    ) -> AnySuccess | ToolError:
        attempts_left = context.retries_allowed(self.max_attempts)
        arguments = self._arguments(data, operation_ref, context)

        def run() -> object:
            return self._complete(self.function, **arguments)

        around = self._around
        attempt: Run = run if around is None else (lambda: around(run))
        try:
            returned = run_within(attempt, self.timeout)
        except CallTimedOut:
            if self.writes:
                return self.error(codes.OUTCOME_UNKNOWN, operation_ref, {"reason": "timeout"})
            return self._wait(
                codes.DEPENDENCY_UNAVAILABLE, operation_ref, "timeout", None, attempts_left
            )
        except Exception as error:
            return self.classify_exception(error, operation_ref, attempts_left)
        return self.parse_returned(returned, operation_ref)

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

    def _wait(
        self,
        code: str,
        operation_ref: str,
        reason: str,
        delay: timedelta | None,
        attempts_left: int,
    ) -> ToolError:
        wait = self.default_retry_delay if delay is None else delay
        wait = min(max(wait, timedelta(0)), self.max_retry_after)
        return self.error(
            code,
            operation_ref,
            {"reason": reason, "retry_after_seconds": math.ceil(wait.total_seconds())},
            not_before=datetime.now(UTC) + wait,
            attempts_left=attempts_left,
        )

    def declared(self, error: BaseException) -> Raised | None:
        """The table's entry for ``error``: the most specific declared class wins."""
        for klass in type(error).__mro__:
            entry = self.errors.get(klass)
            if entry is not None:
                return entry if isinstance(entry, Raised) else Raised(entry)
        return None

    def classify_exception(
        self, error: BaseException, operation_ref: str, attempts_left: int
    ) -> ToolError:
        """By the declared table; anything else is ``unknown`` on a write (the call may
        have reached the downstream) and a dependency failure on a read."""
        reason = snake_case(type(error).__name__)[:60]
        entry = self.declared(error)
        if entry is None:
            if self.writes:
                return self.error(codes.OUTCOME_UNKNOWN, operation_ref, {"reason": reason})
            return self._wait(
                codes.DEPENDENCY_UNAVAILABLE, operation_ref, reason, None, attempts_left
            )
        spec = codes.spec_for(entry.code)
        if spec.directive == "after_delay":
            delay = retry_after_of(error, datetime.now(UTC))
            return self._wait(entry.code, operation_ref, reason, delay, attempts_left)
        details: dict[str, object] = {"reason": reason}
        if entry.field is not None and entry.field in self.input_model.model_fields:
            details.update(field=entry.field, fields=entry.field)
        if not self.writes and spec.commit_state == "unknown":
            # A read changes nothing downstream: its outcome cannot be unknown.
            return self._wait(
                codes.DEPENDENCY_UNAVAILABLE, operation_ref, reason, None, attempts_left
            )
        return self.error(entry.code, operation_ref, details)

    def reports_failure(self, value: object) -> bool:
        """Whether a returned value says the operation failed (``failed=`` overrides)."""
        if self._failed is not None:
            return bool(self._failed(value))
        return isinstance(value, Mapping) and reports_failure(value)

    def parse_returned(self, returned: object, operation_ref: str) -> AnySuccess | ToolError:
        """A normal return: a success with evidence, or a failure the value reports. A
        write without evidence is verified by lookup instead of assumed."""
        value = _plain(returned)
        if value is _UNREADABLE:
            # A read changes nothing: what it could not read is an error, not an unknown.
            code = codes.UNREADABLE_RESPONSE if self.writes else codes.UPSTREAM_ERROR
            return self.error(code, operation_ref)
        if self.reports_failure(value):
            upstream, _ = error_parts(value) if isinstance(value, Mapping) else (None, [])
            mapped = self.upstream_codes.get(upstream) if upstream is not None else None
            if mapped is not None:
                return self.error(mapped, operation_ref, {})
            return self.error(codes.UPSTREAM_ERROR, operation_ref, {}, unknown=self.writes)
        if self.writes and isinstance(value, Mapping) and reports_pending(value):
            # Queued is not stored: a job id is no evidence of the record.
            return self.error(
                codes.OUTCOME_UNKNOWN, operation_ref, {"reason": "accepted_not_stored"}
            )
        evidence = _evidence(value, self.evidence)
        if self.writes and evidence is None:
            return self.error(codes.UNREADABLE_RESPONSE, operation_ref)
        return ToolSuccess[JsonValue](
            operation_ref=operation_ref,
            result=clean_result(value),
            verification=Verification(checked_at=datetime.now(UTC), evidence_ref=evidence),
        )

    # --- lookup --------------------------------------------------------------------
    def _look(self, operation_ref: str) -> object:
        """What the lookup function returns (raises what it raises)."""
        if self.lookup_function is None:
            raise NotImplementedError(f"adapter {self.tool!r} has no lookup")
        lookup_function = self.lookup_function

        def run() -> object:
            return self._complete(lookup_function, operation_ref)

        around = self._around_lookup
        attempt: Run = run if around is None else (lambda: around(run))
        return run_within(attempt, self.timeout)

    def lookup(self, operation_ref: str) -> LookupResult:
        """The lookup function's answer: a record (or a non-empty list of them) → found
        with its evidence; ``None``, ``[]`` or a declared ``absent`` exception → not
        found; any other exception → unavailable (a lookup that is down never reads as
        "not there")."""
        try:
            found = self._look(operation_ref)
        except CallTimedOut:
            return LookupUnavailable(checked_at=datetime.now(UTC), code=lookup_codes.LOOKUP_TIMEOUT)
        except Exception as error:
            now = datetime.now(UTC)
            if self.absent and isinstance(error, self.absent):
                return LookupNotFound(checked_at=now)
            return LookupUnavailable(checked_at=now, code="LOOKUP_EXCEPTION")
        now = datetime.now(UTC)
        if isinstance(found, LookupFound | LookupNotFound | LookupUnavailable):
            return found
        if isinstance(found, list | tuple):
            found = found[0] if found else None
        if found is None:
            return LookupNotFound(checked_at=now)
        value = _plain(found)
        evidence = _evidence(value, self.evidence)
        if value is _UNREADABLE or evidence is None or self.reports_failure(value):
            return LookupUnavailable(checked_at=now, code="LOOKUP_UNREADABLE")
        return LookupFound(checked_at=now, result=clean_result(value), evidence_ref=evidence)

    def count_effects(self, operation_ref: str) -> int | None:
        """How many records the downstream holds for ``operation_ref`` when the lookup
        function returns a list of them; None when it cannot tell."""
        try:
            found = self._look(operation_ref)
        except Exception:
            return None
        if found is None:
            return 0
        return len(found) if isinstance(found, list | tuple) else None

    def close(self) -> None:
        """Nothing to release: the function owns its SDK client."""


__all__ = [
    "CallTimedOut",
    "ErrorTable",
    "FunctionAdapter",
    "Raised",
    "clean_result",
    "retry_after_of",
]
