"""Plain functions as adapters: ``@tool`` turns a function that calls a downstream SDK
(sync or async) and a lookup function into a write adapter, ``@read_tool`` into a read.

The input model comes from the signature (or an explicit pydantic model), the description
from the docstring, and the operation_ref is passed in as the idempotency key. Exceptions
are classified by a declared table; on a write anything not in it is ``unknown``.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import os
import re
import threading
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Final, TypeAlias, cast, overload

from pydantic import BaseModel, ConfigDict, JsonValue, TypeAdapter, create_model

from toolsafe.adapters import codes
from toolsafe.adapters.envelope import AnySuccess, NextAction, ToolError, ToolSuccess, Verification
from toolsafe.adapters.http_responses import (
    error_parts,
    parse_retry_after,
    reports_failure,
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
from toolsafe.adapters.redaction import clean_text, safe_text

EVIDENCE_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/\-]{0,99}$")
_RESULT_DEPTH: Final = 6
_RESULT_ITEMS: Final = 256

Run: TypeAlias = Callable[[], object]
"""One complete call of the wrapped function (awaited when it is async)."""
Around: TypeAlias = Callable[[Run], object]
"""Wraps a call: the conformance kit uses it to raise before or after the real call."""


class CallTimedOut(Exception):
    """The wrapped call did not return within the adapter's ``timeout``."""


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
        return safe_text(value)
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


class _Loop:
    """One event loop per process, in a daemon thread, for the async functions: SDK
    clients bound to a loop keep working from call to call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = 0

    def run(self, coroutine: Coroutine[Any, Any, object]) -> object:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():
                loop = asyncio.new_event_loop()
                threading.Thread(
                    target=loop.run_forever, daemon=True, name="toolsafe-tools"
                ).start()
                self._loop, self._pid = loop, os.getpid()
            loop = self._loop
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result()


_LOOP: Final = _Loop()


def _within(run: Run, timeout: float | None) -> object:
    """``run()`` in a thread of its own, abandoned (not cancelled) after ``timeout``."""
    if timeout is None:
        return run()
    outcome: dict[str, object] = {}
    done = threading.Event()

    def _target() -> None:
        try:
            outcome["value"] = run()
        except BaseException as error:  # handed back to the caller below
            outcome["error"] = error
        finally:
            done.set()

    threading.Thread(target=_target, daemon=True, name="toolsafe-call").start()
    if not done.wait(timeout):
        raise CallTimedOut(timeout)
    if "error" in outcome:
        raise cast(BaseException, outcome["error"])
    return outcome.get("value")


class FunctionAdapter(Adapter[BaseModel]):
    """An adapter around a plain function; made by :func:`tool` and :func:`read_tool`."""

    description: ClassVar[str] = ""
    errors: ClassVar[Mapping[type[BaseException], str | Raised]] = {}
    absent: ClassVar[tuple[type[BaseException], ...]] = ()
    upstream_codes: ClassVar[Mapping[str, str]] = {}
    timeout: ClassVar[float | None] = None
    max_retry_after: ClassVar[timedelta] = timedelta(minutes=5)
    default_retry_delay: ClassVar[timedelta] = timedelta(seconds=2)
    max_attempts: ClassVar[int] = 5

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
            return _LOOP.run(returned)
        return returned

    def execute(
        self, data: BaseModel, operation_ref: str, context: CallContext
    ) -> AnySuccess | ToolError:
        attempts_left = max(self.max_attempts - context.attempt, 0)
        arguments = self._arguments(data, operation_ref, context)

        def run() -> object:
            return self._complete(self.function, **arguments)

        around = self._around
        attempt: Run = run if around is None else (lambda: around(run))
        try:
            returned = _within(attempt, self.timeout)
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
        spec = codes.spec_for(code)
        is_unknown = unknown or spec.commit_state == "unknown"
        action: NextAction | None = None
        if is_unknown:
            action = "verify_operation" if self.has_lookup else "escalate"
        return codes.build_error(
            code,
            operation_ref,
            {"tool": self.tool, **(details or {})},
            not_before=not_before,
            commit_state="unknown" if is_unknown else None,
            next_action=action,
            attempts_remaining=(
                min(attempts_left, spec.max_attempts_remaining)
                if attempts_left is not None and spec.directive == "after_delay"
                else None
            ),
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
            return self.error(codes.UNREADABLE_RESPONSE, operation_ref, unknown=self.writes)
        if self.reports_failure(value):
            upstream, _ = error_parts(value) if isinstance(value, Mapping) else (None, [])
            mapped = self.upstream_codes.get(upstream) if upstream is not None else None
            if mapped is not None:
                return self.error(mapped, operation_ref, {})
            return self.error(codes.UPSTREAM_ERROR, operation_ref, {}, unknown=self.writes)
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
        return _within(attempt, self.timeout)

    def lookup(self, operation_ref: str) -> LookupResult:
        """The lookup function's answer: a record (or a non-empty list of them) → found
        with its evidence; ``None``, ``[]`` or a declared ``absent`` exception → not
        found; any other exception → unavailable (a lookup that is down never reads as
        "not there")."""
        try:
            found = self._look(operation_ref)
        except CallTimedOut:
            return LookupUnavailable(checked_at=datetime.now(UTC), code="LOOKUP_TIMEOUT")
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


# --- the decorators ------------------------------------------------------------------
@dataclass(frozen=True)
class _Signature:
    model: type[BaseModel]
    model_param: str | None
    ref_param: str | None
    context_param: str | None


def _signature(
    function: Callable[..., object],
    name: str,
    input_model: type[BaseModel] | None,
    ref_param: str,
    *,
    writes: bool,
) -> _Signature:
    where = f"tool {name!r} ({getattr(function, '__qualname__', function)!r})"
    parameters = inspect.signature(function).parameters
    rest: dict[str, inspect.Parameter] = {}
    found_ref: str | None = None
    context: str | None = None
    for parameter in parameters.values():
        parameter = parameter.replace(annotation=_resolved(function, parameter, where))
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise TypeError(f"{where}: *args and **kwargs cannot become input fields")
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise TypeError(f"{where}: parameter {parameter.name!r} is positional-only")
        if parameter.name == ref_param:
            found_ref = ref_param
        elif parameter.annotation is CallContext or parameter.name == "context":
            context = parameter.name
        else:
            rest[parameter.name] = parameter
    if writes and found_ref is None:
        raise TypeError(
            f"{where}: a write must take the operation_ref as its idempotency key: "
            f"add a parameter {ref_param!r} and send it to the downstream"
        )
    single = next(iter(rest.values())) if len(rest) == 1 else None
    if single is not None and isinstance(single.annotation, type):
        annotated = single.annotation
        if issubclass(annotated, BaseModel) and (input_model in (None, annotated)):
            return _Signature(annotated, single.name, found_ref, context)
    if input_model is not None:
        missing = set(rest) - set(input_model.model_fields)
        if missing:
            raise TypeError(f"{where}: {input_model.__name__} has no field {sorted(missing)[0]!r}")
        return _Signature(input_model, None, found_ref, context)
    fields: dict[str, Any] = {}
    for parameter in rest.values():
        if parameter.annotation is inspect.Parameter.empty:
            raise TypeError(f"{where}: parameter {parameter.name!r} needs a type annotation")
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[parameter.name] = (parameter.annotation, default)
    model = create_model(f"{_camel(name)}Input", __config__=ConfigDict(extra="forbid"), **fields)
    return _Signature(cast(type[BaseModel], model), None, found_ref, context)


def _resolved(function: Callable[..., object], parameter: inspect.Parameter, where: str) -> Any:
    """A parameter's annotation, evaluated when it is a string (postponed annotations)."""
    annotation = parameter.annotation
    if not isinstance(annotation, str):
        return annotation
    namespace = dict(getattr(function, "__globals__", {}))
    try:
        return eval(annotation, namespace)  # noqa: S307 - the function's own annotation
    except Exception as error:
        raise TypeError(
            f"{where}: cannot resolve the annotation {annotation!r} of {parameter.name!r} "
            f"({type(error).__name__}); define its types at module level"
        ) from None


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", name) if part)


def _description(function: Callable[..., object], given: str | None) -> str:
    text = given if given is not None else inspect.getdoc(function) or ""
    return inspect.cleandoc(text)


@dataclass
class _Options:
    name: str | None = None
    writes: bool = True
    lookup: Callable[[str], object] | None = None
    input_model: type[BaseModel] | None = None
    description: str | None = None
    errors: ErrorTable = field(default_factory=dict)
    absent: tuple[type[BaseException], ...] = ()
    upstream_codes: Mapping[str, str] = field(default_factory=dict)
    evidence: str | Callable[[Any], object] | None = "id"
    failed: Callable[[Any], bool] | None = None
    consistency_window: timedelta = timedelta(0)
    timeout: float | None = None
    max_retry_after: timedelta = timedelta(minutes=5)
    default_retry_delay: timedelta = timedelta(seconds=2)
    idempotency_param: str = "operation_ref"


def _build(function: Callable[..., object], options: _Options) -> FunctionAdapter:
    name: str = options.name or str(getattr(function, "__name__", ""))
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.\-]{0,63}", name):
        raise ValueError(f"tool name {name!r} must be a letter then letters, digits, _ . -")
    for raised, entry in options.errors.items():
        if not (isinstance(raised, type) and issubclass(raised, BaseException)):
            raise TypeError(f"tool {name!r}: error table key {raised!r} is not an exception type")
        codes.spec_for(entry.code if isinstance(entry, Raised) else entry)
    for code in options.upstream_codes.values():
        codes.spec_for(code)
    if options.timeout is not None and not options.timeout > 0:
        raise ValueError(f"tool {name!r}: timeout must be a positive number of seconds")
    if not options.writes and options.lookup is not None:
        raise TypeError(f"tool {name!r}: a read has nothing to look up; drop lookup=")
    shape = _signature(
        function, name, options.input_model, options.idempotency_param, writes=options.writes
    )
    attributes: dict[str, object] = {
        "tool": name,
        "writes": options.writes,
        "input_model": shape.model,
        "has_lookup": options.lookup is not None,
        "consistency_window": options.consistency_window,
        "description": _description(function, options.description),
        "errors": dict(options.errors),
        "absent": tuple(options.absent),
        "upstream_codes": dict(options.upstream_codes),
        "timeout": options.timeout,
        "max_retry_after": options.max_retry_after,
        "default_retry_delay": options.default_retry_delay,
        "__module__": getattr(function, "__module__", __name__),
    }
    klass = cast(type[FunctionAdapter], type(f"{_camel(name)}Tool", (FunctionAdapter,), attributes))
    return klass(
        function,
        options.lookup,
        model_param=shape.model_param,
        ref_param=shape.ref_param,
        context_param=shape.context_param,
        evidence=options.evidence,
        failed=options.failed,
    )


Decorator: TypeAlias = Callable[[Callable[..., object]], FunctionAdapter]


@overload
def tool(function: Callable[..., object], /) -> FunctionAdapter: ...


@overload
def tool(
    *,
    name: str | None = None,
    lookup: Callable[[str], object] | None = None,
    input_model: type[BaseModel] | None = None,
    description: str | None = None,
    errors: ErrorTable | None = None,
    absent: tuple[type[BaseException], ...] = (),
    upstream_codes: Mapping[str, str] | None = None,
    evidence: str | Callable[[Any], object] | None = "id",
    failed: Callable[[Any], bool] | None = None,
    consistency_window: timedelta = timedelta(0),
    timeout: float | None = None,
    max_retry_after: timedelta = timedelta(minutes=5),
    default_retry_delay: timedelta = timedelta(seconds=2),
    idempotency_param: str = "operation_ref",
) -> Decorator: ...


def tool(
    function: Callable[..., object] | None = None,
    /,
    *,
    name: str | None = None,
    lookup: Callable[[str], object] | None = None,
    input_model: type[BaseModel] | None = None,
    description: str | None = None,
    errors: ErrorTable | None = None,
    absent: tuple[type[BaseException], ...] = (),
    upstream_codes: Mapping[str, str] | None = None,
    evidence: str | Callable[[Any], object] | None = "id",
    failed: Callable[[Any], bool] | None = None,
    consistency_window: timedelta = timedelta(0),
    timeout: float | None = None,
    max_retry_after: timedelta = timedelta(minutes=5),
    default_retry_delay: timedelta = timedelta(seconds=2),
    idempotency_param: str = "operation_ref",
) -> FunctionAdapter | Decorator:
    """A write adapter from a function that calls the downstream.

    The function takes its input as parameters (or one pydantic model) and a parameter
    ``operation_ref`` (``idempotency_param``) that it sends as the idempotency key; it may
    take ``context: CallContext``. What it returns is the result; ``evidence`` names the
    field (or a callable) that proves the write. ``lookup(operation_ref)`` returns the
    record, or ``None`` when the downstream does not hold it. ``errors`` maps exception
    types to catalogue codes; any other exception is ``unknown`` and gets verified.
    """
    options = _Options(
        name=name,
        writes=True,
        lookup=lookup,
        input_model=input_model,
        description=description,
        errors=errors or {},
        absent=absent,
        upstream_codes=upstream_codes or {},
        evidence=evidence,
        failed=failed,
        consistency_window=consistency_window,
        timeout=timeout,
        max_retry_after=max_retry_after,
        default_retry_delay=default_retry_delay,
        idempotency_param=idempotency_param,
    )
    if function is not None:
        return _build(function, options)
    return lambda given: _build(given, options)


@overload
def read_tool(function: Callable[..., object], /) -> FunctionAdapter: ...


@overload
def read_tool(
    *,
    name: str | None = None,
    input_model: type[BaseModel] | None = None,
    description: str | None = None,
    errors: ErrorTable | None = None,
    upstream_codes: Mapping[str, str] | None = None,
    evidence: str | Callable[[Any], object] | None = None,
    failed: Callable[[Any], bool] | None = None,
    timeout: float | None = None,
    max_retry_after: timedelta = timedelta(minutes=5),
    default_retry_delay: timedelta = timedelta(seconds=2),
) -> Decorator: ...


def read_tool(
    function: Callable[..., object] | None = None,
    /,
    *,
    name: str | None = None,
    input_model: type[BaseModel] | None = None,
    description: str | None = None,
    errors: ErrorTable | None = None,
    upstream_codes: Mapping[str, str] | None = None,
    evidence: str | Callable[[Any], object] | None = None,
    failed: Callable[[Any], bool] | None = None,
    timeout: float | None = None,
    max_retry_after: timedelta = timedelta(minutes=5),
    default_retry_delay: timedelta = timedelta(seconds=2),
) -> FunctionAdapter | Decorator:
    """A read adapter (the smaller contract): no lookup, no evidence needed, and every
    exception outside the table is a dependency failure that simply waits and retries."""
    options = _Options(
        name=name,
        writes=False,
        input_model=input_model,
        description=description,
        errors=errors or {},
        upstream_codes=upstream_codes or {},
        evidence=evidence,
        failed=failed,
        timeout=timeout,
        max_retry_after=max_retry_after,
        default_retry_delay=default_retry_delay,
        idempotency_param="operation_ref",
    )
    if function is not None:
        return _build(function, options)
    return lambda given: _build(given, options)


__all__ = [
    "CallTimedOut",
    "FunctionAdapter",
    "Raised",
    "clean_result",
    "read_tool",
    "retry_after_of",
    "tool",
]
