"""The adapter protocol: what a user implements to put a downstream behind toolsafe.

An adapter observes the downstream and classifies what happened into an envelope; it
decides nothing about retries beyond what it can prove about its own call.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar, Generic, TypeVar, get_args

from pydantic import BaseModel, JsonValue, SecretBytes, SecretStr, ValidationError
from pydantic_core import to_jsonable_python

from toolsafe.adapters.envelope import AnySuccess, ToolError
from toolsafe.adapters.errors import TraitDeclarationError
from toolsafe.adapters.lookup_codes import LOOKUP_UNSPECIFIED

InputT = TypeVar("InputT", bound=BaseModel)


@dataclass(frozen=True)
class FieldError:
    """One input field that failed validation; ``code`` is a stable identifier."""

    field: str
    code: str


@dataclass(frozen=True)
class LookupFound:
    """The downstream holds the operation: it was committed."""

    checked_at: datetime
    result: JsonValue
    evidence_ref: str | None = None


@dataclass(frozen=True)
class LookupNotFound:
    """The downstream answered and does not (yet) hold the operation."""

    checked_at: datetime


@dataclass(frozen=True)
class LookupUnavailable:
    """The lookup itself could not be answered; nothing is known. ``code`` says why:
    toolsafe's own adapters and guard use ``toolsafe.adapters.lookup_codes.LOOKUP_CODES``;
    ``retry_after`` is the wait the downstream asked for (its ``Retry-After``), if it said."""

    checked_at: datetime
    code: str = LOOKUP_UNSPECIFIED
    retry_after: timedelta | None = None


LookupResult = LookupFound | LookupNotFound | LookupUnavailable


@dataclass(frozen=True)
class CallContext:
    """What the runtime tells an adapter about this execution.

    ``attempt`` is the step's attempt number (1 for its first execution; it counts on
    across a person's decision). ``approval_ref`` is set once a human approved the step
    (bound to its operation_ref and input hash); an adapter passes it downstream where
    approval is required. ``attempts_left`` is how many more executions the runtime's
    own budget allows after this one (``max_attempts - attempts`` of the step; a
    person's decision gives the whole budget again), or ``None`` when no runtime called.
    """

    attempt: int = 1
    approval_ref: str | None = None
    attempts_left: int | None = None

    def retries_allowed(self, max_attempts: int) -> int:
        """What an envelope of this call may offer as ``retry.max_attempts_remaining``
        from an adapter that allows ``max_attempts`` executions per budget: the
        runtime's own count, never more than ``max_attempts - 1``. Counting from the
        attempt number instead would take back what an approval, a corrected input or a
        re-drive granted (the runtime lets an envelope lower its limit). Without a
        runtime's count: ``max_attempts`` minus this attempt's number."""
        if self.attempts_left is None:
            return max(max_attempts - self.attempt, 0)
        return max(min(self.attempts_left, max_attempts - 1), 0)


def field_errors_from(error: ValidationError) -> list[FieldError]:
    """Turn pydantic's errors into field names and codes, dropping the offending values."""
    found: list[FieldError] = []
    for item in error.errors(include_url=False, include_input=False):
        location = ".".join(str(part) for part in item["loc"]) or "input"
        code = str(item["type"]).upper().replace(".", "_").replace("-", "_")
        found.append(FieldError(field=location, code=code))
    return found


def _revealed(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, SecretBytes):
        return value.get_secret_value().decode("utf-8", errors="replace")
    if isinstance(value, dict):
        return {key: _revealed(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_revealed(item) for item in value]
    return value


def _is_secret(annotation: Any) -> bool:
    if annotation in (SecretStr, SecretBytes):
        return True
    return any(_is_secret(argument) for argument in get_args(annotation))


def secret_fields_of(model: type[BaseModel]) -> frozenset[str]:
    return frozenset(
        info.alias or name
        for name, info in model.model_fields.items()
        if _is_secret(info.annotation)
    )


def model_json(model: BaseModel) -> dict[str, Any]:
    """A validated model as plain JSON that validates back to the same model: field
    aliases as declared, defaults explicit, secret values revealed (toolsafe seals them
    before they are stored, see ``toolsafe.recovery.secrets``)."""
    dumped = _revealed(model.model_dump(mode="python", by_alias=True))
    data: dict[str, Any] = to_jsonable_python(dumped)
    return data


class Adapter(ABC, Generic[InputT]):
    """Base class of every tool adapter.

    Subclasses set the class attributes and implement :meth:`execute`; write adapters
    that can look an operation up downstream set ``has_lookup`` and implement
    :meth:`lookup`. ``description`` is what a model reads about the tool (falling back to
    the class's own docstring), ``title`` an optional display name.
    ``consistency_window`` is how long after a write the downstream's lookup may still
    miss it; ``deduplicates_by_key`` says the downstream enforces the idempotency key (see
    there). Input fields typed ``SecretStr`` are encrypted at rest.
    """

    tool: ClassVar[str]
    writes: ClassVar[bool]
    input_model: ClassVar[type[BaseModel]]
    # What a model is told the tool does (tool definitions of every agent stack), and an
    # optional human-readable name. Without a description, the class's own docstring.
    description: ClassVar[str] = ""
    title: ClassVar[str | None] = None
    # The shape of a success's ``result`` (optional): a result passes it before it is
    # stored or shown (unknown keys dropped, types checked), then every string in it is
    # cleaned and scanned (``toolsafe.adapters.results``). Leave extra keys to be ignored.
    result_model: ClassVar[type[BaseModel] | None] = None
    # Hosts (and their subdomains) a result's Markdown or HTML links and images may point
    # at; any other target is neutralised before the result is stored. Override
    # :meth:`link_hosts` for hosts known only at run time (the deployed base URL).
    result_hosts: ClassVar[frozenset[str]] = frozenset()
    has_lookup: ClassVar[bool] = False
    consistency_window: ClassVar[timedelta] = timedelta(0)
    # Declare True only when both hold for the downstream behind this write:
    # 1. it enforces the idempotency key: a second request carrying the operation_ref of
    #    one it has seen never makes a second effect; it answers with the stored result
    #    or "key in flight" (HTTP 409) while the first is still being processed;
    # 2. it keeps each key at least as long as a step may stay in verification plus its
    #    retries (the verification budget and every retry delay of the tool's policy).
    # The adapter must send the operation_ref as that key, and have a lookup. A lookup's
    # "not found" is then final a consistency window after the send, without waiting
    # out the longest call: a request of a killed attempt that arrives late meets the
    # retry's key and is deduplicated (docs/writing-an-adapter.md, "A downstream that
    # deduplicates"). Wrongly declared, it lets a late request make a second effect.
    deduplicates_by_key: ClassVar[bool] = False

    @classmethod
    def describe(cls) -> str:
        """The tool's description: ``description`` when declared, else the first
        paragraph of the class's own docstring (never a base class's), else a plain
        sentence naming the tool and whether it writes."""
        declared = cls.description.strip()
        if declared:
            return declared
        own = cls.__dict__.get("__doc__")
        if isinstance(own, str) and own.strip():
            return inspect.cleandoc(own).split("\n\n", 1)[0].replace("\n", " ")
        kind = "a write" if cls.writes else "a read-only call"
        return f"The {cls.tool} tool ({kind}), run through toolsafe."

    def link_hosts(self) -> frozenset[str]:
        """The hosts a result's links and images may point at (``result_hosts``)."""
        return self.result_hosts

    def parse_input(self, raw: Mapping[str, Any]) -> InputT:
        """The raw input as the adapter's model; raises ``ValidationError``."""
        parsed = self.input_model.model_validate(dict(raw))
        return parsed  # type: ignore[return-value]

    @classmethod
    def secret_fields(cls) -> frozenset[str]:
        """Top-level input fields typed ``SecretStr``/``SecretBytes`` (optional or not),
        by the name they have in the input: toolsafe stores them encrypted."""
        return secret_fields_of(cls.input_model)

    def canonical_input(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """The input as this adapter's model reads it (``42.0`` for an int is ``42``,
        defaults explicit): two inputs are the same call when these are equal. Raises
        ``ValidationError`` for input that :meth:`validate` rejects."""
        return model_json(self.parse_input(raw))

    def validate(self, raw: Mapping[str, Any]) -> list[FieldError]:
        """Field errors of the raw input, empty when it may be sent."""
        try:
            parsed = self.parse_input(raw)
        except ValidationError as error:
            return field_errors_from(error)
        return self.check(parsed)

    def check(self, parsed: InputT) -> list[FieldError]:
        """Rules beyond the model's own (override to add business checks)."""
        return []

    @abstractmethod
    def execute(
        self, data: InputT, operation_ref: str, context: CallContext
    ) -> AnySuccess | ToolError:
        """Perform the call, sending ``operation_ref`` as the idempotency key."""

    def lookup(self, operation_ref: str) -> LookupResult:
        """Look the operation up downstream by its operation_ref."""
        raise NotImplementedError(f"adapter {self.tool!r} has no lookup")

    def refuse_contradictions(self) -> None:
        """Raise ``TraitDeclarationError`` when the adapter declares traits that cannot
        hold together; called at registration (and by the toolkits when they build one)."""
        if not self.deduplicates_by_key:
            return
        if not self.writes:
            raise TraitDeclarationError(
                self.tool,
                "deduplicates_by_key is declared on a read: only a write that sends the "
                "operation_ref as its idempotency key can be deduplicated by it",
            )
        if not self.has_lookup:
            raise TraitDeclarationError(
                self.tool,
                "deduplicates_by_key is declared without a lookup: it only shortens how "
                "long a lookup's 'not found' waits to be final, and without a lookup an "
                "unknown outcome escalates at once",
            )

    def refuse_unknowable(self) -> None:
        """Raise ``toolsafe.adapters.sending.UnknowableMapping`` when the adapter maps an
        exception that can follow a sent request to an outcome that claims to know;
        called at registration. The toolkits check what they can tell; a hand-written
        adapter is checked by ``toolsafe check-adapter``."""
