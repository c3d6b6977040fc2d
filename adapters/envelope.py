"""The envelope contract between adapters, the runtime and the model.

The JSON of these models is the article's wire shape, field for field; the invariants
that tie the fields together are checked on construction and on parsing alike.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Final, Generic, Literal, TypeVar

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    field_validator,
    model_serializer,
    model_validator,
)

CommitState = Literal["not_committed", "committed", "unknown"]
Category = Literal["validation", "authorization", "conflict", "dependency", "internal"]
Directive = Literal["never", "after_delay", "after_input_fix"]
NextAction = Literal[
    "correct_input", "wait_and_retry", "verify_operation", "request_approval", "escalate"
]

COMMIT_STATES: Final = ("not_committed", "committed", "unknown")
CATEGORIES: Final = ("validation", "authorization", "conflict", "dependency", "internal")
DIRECTIVES: Final = ("never", "after_delay", "after_input_fix")
NEXT_ACTIONS: Final = (
    "correct_input",
    "wait_and_retry",
    "verify_operation",
    "request_approval",
    "escalate",
)

CODE_PATTERN: Final = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*$")
CODE_MAX_LENGTH: Final = 63
DETAIL_KEY_PATTERN: Final = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
MAX_DETAILS: Final = 16
MAX_DETAIL_STRING: Final = 200
MAX_MESSAGE: Final = 500
MAX_OPERATION_REF: Final = 200
OPERATION_REF_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/\-]*$")

SafeValue = str | int | float | bool


def _check_operation_ref(value: str) -> str:
    if not value or len(value) > MAX_OPERATION_REF:
        raise ValueError(f"operation_ref must be 1 to {MAX_OPERATION_REF} characters")
    if not OPERATION_REF_PATTERN.fullmatch(value):
        raise ValueError(
            "operation_ref may hold only letters, digits and _ . : / - "
            "and must start with a letter or digit"
        )
    return value


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


class Retry(_Wire):
    """What the adapter says about trying again; the runtime may be stricter."""

    directive: Directive
    not_before: AwareDatetime | None = None
    max_attempts_remaining: Annotated[int, Field(ge=0)]

    @model_validator(mode="after")
    def _not_before_matches_directive(self) -> Retry:
        if self.directive == "after_delay" and self.not_before is None:
            raise ValueError("retry.not_before is required when retry.directive is after_delay")
        if self.directive != "after_delay" and self.not_before is not None:
            raise ValueError(
                f"retry.not_before must be absent when retry.directive is {self.directive}"
            )
        return self

    @model_serializer(mode="wrap")
    def _omit_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if data.get("not_before") is None:
            data.pop("not_before", None)
        return data


class ToolError(_Wire):
    """A tool call that did not (provably) reach its target state."""

    ok: Literal[False] = False
    code: str
    category: Category
    commit_state: CommitState
    retry: Retry
    next_action: NextAction
    operation_ref: str
    safe_details: dict[str, SafeValue] = Field(default_factory=dict)
    agent_message: Annotated[str, Field(max_length=MAX_MESSAGE)]
    user_message: Annotated[str, Field(max_length=MAX_MESSAGE)]

    @field_validator("code")
    @classmethod
    def _code_shape(cls, value: str) -> str:
        if len(value) > CODE_MAX_LENGTH:
            raise ValueError(f"code must be at most {CODE_MAX_LENGTH} characters")
        if not CODE_PATTERN.fullmatch(value):
            raise ValueError("code must be UPPER_SNAKE_CASE, e.g. OUTCOME_UNKNOWN")
        return value

    @field_validator("operation_ref")
    @classmethod
    def _ref_shape(cls, value: str) -> str:
        return _check_operation_ref(value)

    @field_validator("safe_details", mode="before")
    @classmethod
    def _details_shape(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError("safe_details must be an object of scalar values")
        if len(value) > MAX_DETAILS:
            raise ValueError(f"safe_details may hold at most {MAX_DETAILS} entries")
        for key, item in value.items():
            if not isinstance(key, str) or not DETAIL_KEY_PATTERN.fullmatch(key):
                raise ValueError(
                    f"safe_details key {key!r} must be a lower_snake_case identifier "
                    "of at most 40 characters"
                )
            if isinstance(item, bool | int | float):
                continue
            if isinstance(item, str):
                if len(item) > MAX_DETAIL_STRING:
                    raise ValueError(
                        f"safe_details.{key} is longer than {MAX_DETAIL_STRING} characters"
                    )
                continue
            raise ValueError(
                f"safe_details.{key} must be a string, number or boolean, not {type(item).__name__}"
            )
        return value

    @model_validator(mode="after")
    def _states_agree(self) -> ToolError:
        directive = self.retry.directive
        if self.commit_state == "committed":
            raise ValueError(
                "commit_state: committed is a success; a ToolError is not_committed or unknown"
            )
        if self.commit_state == "unknown":
            if directive != "never":
                raise ValueError("commit_state: unknown requires retry.directive: never")
            if self.next_action not in ("verify_operation", "escalate"):
                raise ValueError(
                    "commit_state: unknown requires next_action verify_operation or escalate"
                )
        if self.next_action == "wait_and_retry":
            if directive != "after_delay":
                raise ValueError(
                    "next_action: wait_and_retry requires retry.directive: after_delay"
                )
            if self.commit_state != "not_committed":
                raise ValueError("next_action: wait_and_retry requires commit_state: not_committed")
            if self.retry.max_attempts_remaining < 1:
                raise ValueError(
                    "next_action: wait_and_retry requires retry.max_attempts_remaining >= 1"
                )
        if (directive == "after_input_fix") != (self.next_action == "correct_input"):
            raise ValueError(
                "retry.directive: after_input_fix and next_action: correct_input go together"
            )
        if directive == "after_input_fix" and self.commit_state != "not_committed":
            raise ValueError(
                "retry.directive: after_input_fix requires commit_state: not_committed"
            )
        return self

    @property
    def not_before(self) -> datetime | None:
        return self.retry.not_before


class Verification(_Wire):
    """How the success was confirmed: when, and a reference to the evidence."""

    checked_at: AwareDatetime
    evidence_ref: str | None = None

    @model_serializer(mode="wrap")
    def _omit_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if data.get("evidence_ref") is None:
            data.pop("evidence_ref", None)
        return data


T = TypeVar("T")


class ToolSuccess(_Wire, Generic[T]):
    """A tool call whose target state was checked: success needs evidence."""

    ok: Literal[True] = True
    operation_ref: str
    commit_state: Literal["committed"] = "committed"
    result: T
    verification: Verification

    @field_validator("operation_ref")
    @classmethod
    def _ref_shape(cls, value: str) -> str:
        return _check_operation_ref(value)


AnySuccess = ToolSuccess[JsonValue]
ToolResult = Annotated[AnySuccess | ToolError, Field(discriminator="ok")]
"""Either envelope, told apart by its ``ok`` field."""

TOOL_RESULT_ADAPTER: Final[TypeAdapter[AnySuccess | ToolError]] = TypeAdapter(ToolResult)


def parse_result(data: Any) -> AnySuccess | ToolError:
    """Parse wire JSON (a dict) into an envelope, checking every invariant."""
    return TOOL_RESULT_ADAPTER.validate_python(data)


def parse_result_json(raw: str | bytes) -> AnySuccess | ToolError:
    return TOOL_RESULT_ADAPTER.validate_json(raw)


def to_wire(envelope: AnySuccess | ToolError | ToolSuccess[Any]) -> dict[str, Any]:
    """The envelope as wire JSON (plain dicts, ``not_before`` as ISO-8601 with offset)."""
    data: dict[str, Any] = envelope.model_dump(mode="json")
    return data


def json_schema() -> dict[str, Any]:
    """The JSON Schema of :data:`ToolResult`, as committed in ``adapters/schema``."""
    schema: dict[str, Any] = TOOL_RESULT_ADAPTER.json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "ToolResult"
    return schema


def flagged_fields(envelope: ToolError) -> tuple[str, ...]:
    """The input fields an error names: ``safe_details["field"]`` for one field,
    ``safe_details["fields"]`` (comma-separated) for several."""
    names: list[str] = []
    for key in ("field", "fields"):
        value = envelope.safe_details.get(key)
        if isinstance(value, str):
            names.extend(part.strip() for part in value.split(",") if part.strip())
    return tuple(sorted(set(names)))
