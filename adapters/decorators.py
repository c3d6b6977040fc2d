"""``@tool`` and ``@read_tool``: a plain function that calls a downstream SDK (sync or
async), plus a lookup function, becomes an adapter. The input model comes from the
signature (or an explicit pydantic model), the description from the docstring, and the
operation_ref is passed in as the idempotency key."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeAlias, cast, overload

from pydantic import BaseModel, ConfigDict, create_model

from toolsafe.adapters import codes
from toolsafe.adapters.function import ErrorTable, FunctionAdapter, Raised
from toolsafe.adapters.protocol import CallContext
from toolsafe.adapters.sending import KeyPlace, check_before_send


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
    title: str | None = None
    errors: ErrorTable = field(default_factory=dict)
    absent: tuple[type[BaseException], ...] = ()
    before_send: tuple[type[BaseException], ...] = ()
    idempotency_place: KeyPlace | None = None
    upstream_codes: Mapping[str, str] = field(default_factory=dict)
    evidence: str | Callable[[Any], object] | None = "id"
    failed: Callable[[Any], bool] | None = None
    consistency_window: timedelta = timedelta(0)
    deduplicates_by_key: bool = False
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
    if options.title is not None and not (isinstance(options.title, str) and options.title.strip()):
        raise ValueError(f"tool {name!r}: title must be non-empty text when given")
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
        "deduplicates_by_key": options.deduplicates_by_key,
        "description": _description(function, options.description),
        "title": options.title,
        "errors": dict(options.errors),
        "absent": tuple(options.absent),
        "before_send": check_before_send(name, options.before_send),
        "idempotency_place": options.idempotency_place,
        "upstream_codes": dict(options.upstream_codes),
        "timeout": options.timeout,
        "max_retry_after": options.max_retry_after,
        "default_retry_delay": options.default_retry_delay,
        "__module__": getattr(function, "__module__", __name__),
    }
    klass = cast(type[FunctionAdapter], type(f"{_camel(name)}Tool", (FunctionAdapter,), attributes))
    adapter = klass(
        function,
        options.lookup,
        model_param=shape.model_param,
        ref_param=shape.ref_param,
        context_param=shape.context_param,
        evidence=options.evidence,
        failed=options.failed,
    )
    adapter.refuse_contradictions()
    adapter.refuse_unknowable()
    return adapter


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
    title: str | None = None,
    errors: ErrorTable | None = None,
    absent: tuple[type[BaseException], ...] = (),
    before_send: Iterable[type[BaseException]] = (),
    idempotency_place: KeyPlace | None = None,
    upstream_codes: Mapping[str, str] | None = None,
    evidence: str | Callable[[Any], object] | None = "id",
    failed: Callable[[Any], bool] | None = None,
    consistency_window: timedelta = timedelta(0),
    deduplicates_by_key: bool = False,
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
    title: str | None = None,
    errors: ErrorTable | None = None,
    absent: tuple[type[BaseException], ...] = (),
    before_send: Iterable[type[BaseException]] = (),
    idempotency_place: KeyPlace | None = None,
    upstream_codes: Mapping[str, str] | None = None,
    evidence: str | Callable[[Any], object] | None = "id",
    failed: Callable[[Any], bool] | None = None,
    consistency_window: timedelta = timedelta(0),
    deduplicates_by_key: bool = False,
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
    types to catalogue codes; any other exception is ``unknown`` and gets verified. An
    exception that can be raised after the request may have left (a read timeout, a
    connection reset; ``toolsafe.adapters.sending``) may map only to ``OUTCOME_UNKNOWN``
    unless it is listed in ``before_send`` (raised only before anything is sent): the
    decorator refuses the table otherwise, naming the exception and the code.
    ``idempotency_place`` (a ``KeyPlace``) says where the function sends the
    operation_ref, for the conformance kit to check. ``deduplicates_by_key=True`` declares
    that the downstream enforces that key (a second request with it never makes a second
    effect; keys kept at least as long as a step may verify and retry; see
    ``Adapter.deduplicates_by_key``): a lookup's "not found" is then final one
    ``consistency_window`` after the send. It needs ``lookup``.
    ``description`` (default: the docstring) is what a model reads about the tool;
    ``title`` an optional display name.
    """
    options = _Options(
        name=name,
        writes=True,
        lookup=lookup,
        input_model=input_model,
        description=description,
        title=title,
        errors=errors or {},
        absent=absent,
        before_send=tuple(before_send),
        idempotency_place=idempotency_place,
        upstream_codes=upstream_codes or {},
        evidence=evidence,
        failed=failed,
        consistency_window=consistency_window,
        deduplicates_by_key=deduplicates_by_key,
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
    title: str | None = None,
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
    title: str | None = None,
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
        title=title,
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


__all__ = ["read_tool", "tool"]
