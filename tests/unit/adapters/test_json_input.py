"""The one strict JSON reader every door uses, and the input check every client runs."""

from __future__ import annotations

import pytest

from toolsafe.adapters.errors import INPUT_NOT_JSON, INPUT_TOO_DEEP, InvalidInput
from toolsafe.adapters.json_input import (
    MAX_JSON_DEPTH,
    JsonInputError,
    check_input,
    check_value,
    read_json,
)
from toolsafe.gateway.client import OPERATIONS


def _deep(depth: int) -> object:
    value: object = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("data", "fault", "said"),
    [
        (b'{"a": "\xff"}', "not_utf8", "not valid UTF-8 (byte 7"),
        (b'{"a": "\\ud800"}', "lone_surrogate", "lone surrogate"),
        (b'{"a": "\\udc00x"}', "lone_surrogate", "lone surrogate"),
        (b"[" * 10_000 + b"]" * 10_000, "too_deep", "deeper than 64 levels"),
        (b"[" * 65 + b"]" * 65, "too_deep", "deeper than 64 levels"),
        (b'{"a": NaN}', "not_json", "not JSON"),
        (b"[1e400]", "not_json", "out of JSON's range"),
        (b"{not json", "not_json", "not JSON"),
        (b"", "not_json", "not JSON"),
    ],
)
def test_what_cannot_be_read_exactly_is_refused(data: bytes, fault: str, said: str) -> None:
    with pytest.raises(JsonInputError) as refused:
        read_json(data)
    assert refused.value.fault == fault
    assert said in str(refused.value) and "\n" not in str(refused.value)


def test_what_can_be_read_is_read_exactly() -> None:
    assert read_json('{"a": "\\ud83d\\ude00", "n": 12345678901234567890}') == {
        "a": "😀",
        "n": 12345678901234567890,
    }
    assert read_json(b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH) == _deep(MAX_JSON_DEPTH)


def test_the_value_check_is_iterative_and_names_the_limit() -> None:
    check_value({"a": _deep(MAX_JSON_DEPTH - 1)})
    with pytest.raises(JsonInputError, match="deeper than 64"):
        check_value({"a": _deep(100_000)})  # far past any recursion limit
    with pytest.raises(InvalidInput) as deep:
        check_input("create_invoice", {"a": _deep(100)})
    assert deep.value.code == INPUT_TOO_DEEP
    with pytest.raises(InvalidInput) as nan:
        check_input("create_invoice", {"a": float("nan")})
    assert nan.value.code == INPUT_NOT_JSON


def test_the_gateway_client_refuses_before_sending() -> None:
    # The operations' plans refuse before they yield their first request.
    with pytest.raises(InvalidInput) as refused:
        next(OPERATIONS.submit("create_invoice", {"a": _deep(10_000)}, "run/1"))
    assert refused.value.code == INPUT_TOO_DEEP
    with pytest.raises(InvalidInput):
        next(OPERATIONS.provide_input("run/1", {"a": _deep(100)}))
