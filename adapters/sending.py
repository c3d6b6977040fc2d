"""Which exceptions can be raised after a request may have left: read and write timeouts,
a connection reset or closed mid-response, remote protocol errors. A write cannot map
them to an outcome that claims to know (``not_committed``) unless its author declares
them raised only before sending (``before_send``). The client libraries are recognised
by their classes' module and name, so none of them has to be installed here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal, TypeVar

from toolsafe.adapters.codes import IDEMPOTENCY_KEY_IN_FLIGHT
from toolsafe.adapters.errors import ToolsafeError, TraitDeclarationError

Sent = Literal["before", "maybe"]
ExceptionT = TypeVar("ExceptionT", bound=type[BaseException])

_MARK: Final = "__toolsafe_after_send__"

# (top-level module, class name) → whether its instances may follow a sent request.
_FAMILIES: Final[Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {
    # family: (may follow a send, raised only before sending)
    "httpx": (
        (
            "ReadTimeout", "WriteTimeout", "ReadError", "WriteError", "RemoteProtocolError",
            "NetworkError", "TimeoutException", "TransportError", "RequestError", "HTTPError",
            "ProtocolError", "DecodingError", "HTTPStatusError", "TooManyRedirects",
        ),
        (
            "ConnectTimeout", "PoolTimeout", "ConnectError", "ProxyError", "InvalidURL",
            "UnsupportedProtocol", "LocalProtocolError",
        ),
    ),
    "httpcore": (
        (
            "ReadTimeout", "WriteTimeout", "ReadError", "WriteError", "RemoteProtocolError",
            "NetworkError", "TimeoutException", "ProtocolError",
        ),
        (
            "ConnectTimeout", "PoolTimeout", "ConnectError", "ProxyError",
            "LocalProtocolError", "UnsupportedProtocol",
        ),
    ),
    "requests": (
        (
            "ReadTimeout", "Timeout", "ConnectionError", "ChunkedEncodingError",
            "ContentDecodingError", "RequestException", "HTTPError", "RetryError",
        ),
        (
            "ConnectTimeout", "ProxyError", "SSLError", "InvalidURL", "InvalidSchema",
            "MissingSchema", "InvalidHeader", "URLRequired",
        ),
    ),
    "urllib3": (
        (
            "ReadTimeoutError", "TimeoutError", "ProtocolError", "IncompleteRead",
            "ResponseError", "MaxRetryError", "HTTPError", "InvalidChunkLength",
        ),
        (
            "ConnectTimeoutError", "NewConnectionError", "NameResolutionError",
            "LocationParseError", "ProxyError", "SSLError",
        ),
    ),
    "aiohttp": (
        (
            "ServerTimeoutError", "SocketTimeoutError", "ServerDisconnectedError",
            "ClientPayloadError", "ClientResponseError", "ClientOSError",
            "ClientConnectionError", "ServerConnectionError", "ClientError",
            "ClientConnectionResetError",
        ),
        (
            "ClientConnectorError", "ClientConnectorDNSError", "ClientProxyConnectionError",
            "ClientConnectorSSLError", "ClientConnectorCertificateError", "ClientSSLError",
            "ConnectionTimeoutError", "InvalidURL", "InvalidUrlClientError",
        ),
    ),
    "grpc": (("RpcError", "AioRpcError", "_InactiveRpcError", "_MultiThreadedRendezvous"), ()),
    "botocore": (
        (
            "ReadTimeoutError", "ConnectionClosedError", "ResponseStreamingError",
            "IncompleteReadError", "HTTPClientError", "ConnectionError", "BotoCoreError",
            "ClientError",
        ),
        (
            "EndpointConnectionError", "ConnectTimeoutError", "ProxyConnectionError",
            "SSLError", "ParamValidationError", "NoCredentialsError", "NoRegionError",
        ),
    ),
    "openai": (("APITimeoutError", "APIConnectionError", "APIStatusError", "APIError"), ()),
    "anthropic": (("APITimeoutError", "APIConnectionError", "APIStatusError", "APIError"), ()),
    "builtins": (
        (
            "TimeoutError", "ConnectionResetError", "ConnectionAbortedError",
            "BrokenPipeError", "ConnectionError",
        ),
        ("ConnectionRefusedError",),
    ),
    "socket": (("timeout",), ("gaierror", "herror")),
    "http": (("RemoteDisconnected", "IncompleteRead", "BadStatusLine", "HTTPException"), ()),
    "asyncio": (("IncompleteReadError", "TimeoutError"), ()),
}  # fmt: skip
_TABLE: Final[Mapping[tuple[str, str], Sent]] = {
    **{(top, name): "maybe" for top, (sent, _) in _FAMILIES.items() for name in sent},
    **{(top, name): "before" for top, (_, before) in _FAMILIES.items() for name in before},
}
# Roots that are not themselves network errors but catch them: declared as such they
# cover timeouts and resets; a subclass of them is the author's own and not judged.
_COVERS: Final = frozenset({("builtins", "Exception"), ("builtins", "BaseException"),
                            ("builtins", "OSError")})  # fmt: skip


def after_send(klass: ExceptionT) -> ExceptionT:
    """Mark an exception class (your own, or an SDK's) as one that can be raised after
    the request may have left: a write can then not map it to ``not_committed`` unless
    it is declared ``before_send``. Usable as a class decorator."""
    if not (isinstance(klass, type) and issubclass(klass, BaseException)):
        raise TypeError(f"after_send() takes an exception class, not {klass!r}")
    try:
        setattr(klass, _MARK, klass)
    except TypeError:
        raise TypeError(
            f"after_send(): {klass.__qualname__} is a built-in type; toolsafe already "
            "knows the built-in network errors"
        ) from None
    return klass


def _key(klass: type[BaseException]) -> tuple[str, str]:
    return klass.__module__.split(".", 1)[0], klass.__name__


def _marked(klass: type[BaseException]) -> bool:
    return klass.__dict__.get(_MARK) is klass


def may_follow_send(klass: type[BaseException]) -> str | None:
    """Why instances of ``klass`` (or what it catches) can be raised after a request may
    have left; None when it is raised only before sending or toolsafe cannot tell."""
    for each in klass.__mro__:
        if _marked(each):
            return f"{each.__qualname__} is marked after_send()"
        if each is klass and _key(each) in _COVERS:
            return f"declared as {each.__name__}, it catches TimeoutError and ConnectionResetError"
        sent = _TABLE.get(_key(each))
        if sent == "before":
            return None
        if sent == "maybe":
            family = _key(each)[0]
            return f"{family}'s {each.__name__}: a timeout or a connection lost after sending"
    return None


def _name(klass: type[BaseException]) -> str:
    module = klass.__module__
    return klass.__qualname__ if module == "builtins" else f"{module}.{klass.__qualname__}"


class UnknowableMapping(ToolsafeError, TypeError):
    """An adapter maps an exception that can follow a sent request to an outcome that
    claims to know (``not_committed``): refused when the adapter is made or registered."""

    def __init__(
        self, tool: str, where: str, raised: type[BaseException], code: str, why: str, state: str
    ) -> None:
        super().__init__(tool, where, raised, code, why, state)
        self.tool = tool
        self.where = where
        self.raised = raised
        self.code = code
        self.why = why
        self.state = state

    def __str__(self) -> str:
        name = self.raised.__name__
        return (
            f"tool {self.tool!r}: {self.where} maps {_name(self.raised)} to {self.code} "
            f"({self.state}), but {name} can be raised after the request may have left "
            f"({self.why}). The rule: a write's outcome after such an exception is unknown, "
            f"never {self.state}. Map it to OUTCOME_UNKNOWN or leave it out (what is not "
            f"mapped is verified by lookup); if {name} is raised only before anything is "
            f"sent, declare it: before_send={{{name}}}."
        )


@dataclass(frozen=True)
class KeyPlace:
    """Where a write sends its operation_ref as the idempotency key: a header, a field
    of the JSON body (dotted for a nested one) or a query parameter."""

    where: Literal["header", "body", "query"]
    name: str

    def __post_init__(self) -> None:
        if self.where not in ("header", "body", "query"):
            raise ValueError(f"KeyPlace.where must be header, body or query, not {self.where!r}")
        if not (isinstance(self.name, str) and self.name.strip()):
            raise ValueError("KeyPlace.name must name the header, field or parameter")

    def __str__(self) -> str:
        if self.where == "header":
            return f"the {self.name} header"
        if self.where == "body":
            return f"the body field {self.name!r}"
        return f"the query parameter {self.name!r}"


@dataclass(frozen=True)
class Declared:
    """One mapping to judge: the exception type, the code, the commit state it claims."""

    raised: type[BaseException]
    code: str
    commit_state: str


def refuse_unknowable(
    tool: str,
    where: str,
    declared: Iterable[Declared],
    before_send: Iterable[type[BaseException]] = (),
) -> None:
    """Raise :class:`UnknowableMapping` for the first mapping of an exception that can
    follow a sent request to anything but ``unknown`` (``before_send`` types excepted)."""
    exempt = tuple(before_send)
    for item in declared:
        if item.commit_state == "unknown" or issubclass(item.raised, exempt):
            continue
        why = may_follow_send(item.raised)
        if why is not None:
            raise UnknowableMapping(tool, where, item.raised, item.code, why, item.commit_state)


def refuse_in_flight_conflict(tool: str, mapped: Iterable[str]) -> None:
    """For a write declaring ``deduplicates_by_key`` over HTTP: one of the upstream codes
    it ``mapped`` must become ``IDEMPOTENCY_KEY_IN_FLIGHT`` (unknown). A retry that meets
    the first request still in flight gets that answer; unmapped it would be a 409
    conflict saying nothing was written, while the first request may yet commit."""
    if IDEMPOTENCY_KEY_IN_FLIGHT not in set(mapped):
        raise TraitDeclarationError(
            tool,
            "deduplicates_by_key needs upstream_codes to map the downstream's 'key in "
            f"flight' code to {IDEMPOTENCY_KEY_IN_FLIGHT}: else a retry meeting the first "
            "request in flight is a 409 conflict, reported as not written",
        )


def check_before_send(tool: str, before_send: Iterable[object]) -> tuple[type[BaseException], ...]:
    """``before_send`` as a tuple of exception classes; anything else is refused."""
    found: list[type[BaseException]] = []
    for item in before_send:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise TypeError(f"tool {tool!r}: before_send holds {item!r}, not an exception type")
        found.append(item)
    return tuple(found)


__all__ = [
    "Declared",
    "KeyPlace",
    "UnknowableMapping",
    "after_send",
    "check_before_send",
    "may_follow_send",
    "refuse_in_flight_conflict",
    "refuse_unknowable",
]
