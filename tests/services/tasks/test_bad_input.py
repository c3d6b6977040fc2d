"""Bad input gets a clear error, through the Python client (real PostgreSQL and Redis)
and the CLI (SQLite, real Redis): the same call read the same, inputs that are not JSON
objects, toolsafe's size limit, and messages that never echo a caller's whole value."""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import toolsafe.tasks.app
from tests.support.pipeline.harness import Cluster, cluster_for, new_ref
from toolsafe.adapters.errors import (
    INPUT_NOT_AN_OBJECT,
    INPUT_NOT_JSON,
    INPUT_TOO_DEEP,
    INPUT_TOO_LARGE,
)
from toolsafe.cli.main import EXIT_REFUSED, EXIT_USAGE, main
from toolsafe.recovery.store import InvalidOperationRef, OperationRefConflict, StepNotFound
from toolsafe.tasks.client import Client, InvalidInput

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

INVOICE = {"customer_id": "cus_1", "amount_cents": 4200, "currency": "EUR"}
HUGE_REF = "r" * 5_000_000
NOT_OBJECTS = [None, [1, 2], "customer_id=cus_1", 42]
TOO_LARGE = {**INVOICE, "memo": "x" * 300_000}  # over 256 KiB, whatever the model says


@pytest.fixture(scope="module")
def cluster(
    pg_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    with cluster_for(
        pg_url, redis_url, tmp_path_factory.mktemp("bad_input"), suffix="bad_input"
    ) as running:
        yield running


def _queued(redis_url: str) -> int:
    client = redis.Redis.from_url(redis_url)
    try:
        return int(client.llen("toolsafe.execute"))
    finally:
        client.close()


def test_client_same_call_read_the_same(cluster: Cluster) -> None:
    client = cluster.client
    ref = new_ref("bad/same")
    first = client.submit("create_invoice", INVOICE, operation_ref=ref)
    # 42.0 is the model's 42, and the default memo made explicit is the same call.
    again = client.submit(
        "create_invoice", {**INVOICE, "amount_cents": 4200.0, "memo": None}, operation_ref=ref
    )
    assert again.operation_ref == first.operation_ref
    assert client.runtime.store.get(ref).input == {**INVOICE, "memo": None}  # canonical, as stored
    assert len([e for e in client.view(ref).history if e.kind == "submitted"]) == 1
    with pytest.raises(OperationRefConflict, match="different input"):
        client.submit("create_invoice", {**INVOICE, "amount_cents": 4201}, operation_ref=ref)


@pytest.mark.parametrize("value", NOT_OBJECTS, ids=["none", "list", "string", "number"])
def test_client_input_that_is_not_an_object(cluster: Cluster, value: object) -> None:
    with pytest.raises(InvalidInput) as caught:
        cluster.client.submit("create_invoice", value)  # type: ignore[arg-type]
    assert caught.value.code == INPUT_NOT_AN_OBJECT
    assert "INPUT_NOT_AN_OBJECT" in str(caught.value)
    assert pickle.loads(pickle.dumps(caught.value)).code == INPUT_NOT_AN_OBJECT


def test_client_input_json_cannot_carry(cluster: Cluster) -> None:
    for bad in ({**INVOICE, "amount_cents": float("nan")}, {**INVOICE, "tags": {1, 2}}):
        with pytest.raises(InvalidInput) as caught:
            cluster.client.submit("create_invoice", bad)
        assert caught.value.code == INPUT_NOT_JSON


def _nested(depth: int) -> dict[str, object]:
    """An input ``depth`` levels deep, built without recursion."""
    inner: object = []
    for _ in range(depth - 2):
        inner = [inner]
    return {**INVOICE, "memo": inner}


@pytest.mark.parametrize("depth", [100, 10_000])
def test_client_input_too_deep_is_neither_stored_nor_sent(
    cluster: Cluster, redis_url: str, depth: int
) -> None:
    ref = new_ref("bad/deep")
    before = _queued(redis_url)
    with pytest.raises(InvalidInput) as caught:
        cluster.client.submit("create_invoice", _nested(depth), operation_ref=ref)
    assert caught.value.code == INPUT_TOO_DEEP
    assert "64 levels" in str(caught.value)
    with pytest.raises(StepNotFound):
        cluster.client.runtime.store.get(ref)
    assert _queued(redis_url) == before


def test_client_input_too_large_is_neither_stored_nor_sent(
    cluster: Cluster, redis_url: str
) -> None:
    ref = new_ref("bad/large")
    before = _queued(redis_url)
    with pytest.raises(InvalidInput) as caught:
        cluster.client.submit("create_invoice", TOO_LARGE, operation_ref=ref)
    assert caught.value.code == INPUT_TOO_LARGE
    assert "262144 bytes" in str(caught.value)
    with pytest.raises(StepNotFound):
        cluster.client.runtime.store.get(ref)
    assert _queued(redis_url) == before


def test_client_messages_quote_only_a_prefix(cluster: Cluster) -> None:
    with pytest.raises(InvalidOperationRef) as invalid:
        cluster.client.submit("create_invoice", INVOICE, operation_ref=HUGE_REF)
    with pytest.raises(StepNotFound) as missing:
        cluster.client.view(HUGE_REF)
    extra = {**INVOICE, "k" * 1_000_000: 1}  # an extra field's name is the caller's too
    with pytest.raises(InvalidInput) as unknown_field:
        cluster.client.submit("create_invoice", extra)
    for error in (invalid.value, missing.value, unknown_field.value):
        assert len(str(error)) < 300, str(error)[:300]
    assert "5000000 characters" in str(invalid.value)
    assert "5000000 characters" in str(missing.value)
    # The exceptions keep (and pickle) a prefix only, not the caller's 5 MB.
    for error in (invalid.value, missing.value):
        assert len(repr(error)) < 400 and len(pickle.dumps(error)) < 1_000
        assert str(pickle.loads(pickle.dumps(error))) == str(error)


# ---------------------------------------------------------------------- the CLI


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_url: str) -> Iterator[Path]:
    monkeypatch.setenv("TOOLSAFE_DATABASE_URL", f"sqlite:///{tmp_path / 'toolsafe.db'}")
    monkeypatch.setenv("TOOLSAFE_ADAPTERS", "toolsafe.adapters.examples")
    monkeypatch.setenv("TOOLSAFE_BROKER_URL", redis_url)
    monkeypatch.setattr(toolsafe.tasks.app, "_default", None)
    assert main(["migrate"]) == 0
    yield tmp_path
    if toolsafe.tasks.app._default is not None:
        toolsafe.tasks.app._default.runtime.close()
        toolsafe.tasks.app._default.close()
    monkeypatch.setattr(toolsafe.tasks.app, "_default", None)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_walks_every_case(cli_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ref = "cli/bad_input_1"
    code, out, _ = _cli(capsys, "submit", "create_invoice", "--input", json.dumps(INVOICE),
                        "--ref", ref)  # fmt: skip
    assert code == 0 and "pending" in out
    same = json.dumps({**INVOICE, "amount_cents": 4200.0, "memo": None})
    code, out, err = _cli(capsys, "submit", "create_invoice", "--input", same, "--ref", ref)
    assert code == 0, err
    other = json.dumps({**INVOICE, "amount_cents": 1})
    code, _, err = _cli(capsys, "submit", "create_invoice", "--input", other, "--ref", ref)
    assert code == EXIT_REFUSED and "different input" in err
    for value in NOT_OBJECTS:
        code, _, err = _cli(capsys, "submit", "create_invoice", "--input", json.dumps(value))
        assert code == EXIT_REFUSED and INPUT_NOT_AN_OBJECT in err, err
    large = cli_env / "large.json"
    large.write_text(json.dumps(TOO_LARGE), encoding="utf-8")
    code, _, err = _cli(capsys, "submit", "create_invoice", "--input", f"@{large}")
    assert code == EXIT_REFUSED and INPUT_TOO_LARGE in err
    code, _, err = _cli(capsys, "submit", "create_invoice", "--input", "{not json")
    assert code == EXIT_USAGE and "is not JSON" in err
    # Too deep for toolsafe, or for any recursive parser: one line, never a traceback.
    for depth in (100, 10_000):
        deep = '{"customer_id": ' + "[" * depth + "]" * depth + "}"
        code, _, err = _cli(capsys, "submit", "create_invoice", "--input", deep)
        assert code == EXIT_USAGE and "deeper than 64 levels" in err, err[:300]
        assert err.count("\n") == 1 and "Traceback" not in err
    code, _, err = _cli(capsys, "submit", "create_invoice", "--input", '{"a": "\\ud800"}')
    assert code == EXIT_USAGE and "lone surrogate" in err and err.count("\n") == 1
    huge = "r" * 200_000  # as long as a command line allows
    code, _, err = _cli(capsys, "submit", "create_invoice", "--input", json.dumps(INVOICE),
                        "--ref", huge)  # fmt: skip
    assert code == EXIT_REFUSED and "200000 characters" in err and len(err) < 300
    code, _, err = _cli(capsys, "steps", "show", huge)
    assert code == EXIT_REFUSED and len(err) < 300
    code, out, _ = _cli(capsys, "steps", "list")
    assert out.count("create_invoice") == 1  # only the one good call was stored
    assert Client().runtime.store.get(ref).input["amount_cents"] == 4200
