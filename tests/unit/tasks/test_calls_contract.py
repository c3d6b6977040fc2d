"""The four clients satisfy the client contract (``toolsafe.tasks.calls``): statically
(the annotated assignments below are checked by mypy in CI) and at run time, method by
method with the same parameters; and the testing kit drives a client through it."""

from __future__ import annotations

import inspect

import pytest

from toolsafe import AsyncCalls, Calls
from toolsafe.gateway.client import AsyncGatewayClient, GatewayClient
from toolsafe.recovery.states import StepState
from toolsafe.tasks.async_client import AsyncClient
from toolsafe.tasks.client import Client
from toolsafe.testing import Hint, RecordingHints, ScriptedAdapter, envelopes, memory_runtime

NOWHERE = "http://127.0.0.1:9"
INPUT = {"recipient_email": "a@example.com", "amount": 120}


def _clients() -> tuple[Client, GatewayClient, AsyncClient, AsyncGatewayClient]:
    runtime, _ = memory_runtime(ScriptedAdapter())
    local = Client(runtime=runtime, hints=RecordingHints())
    return local, GatewayClient(NOWHERE), AsyncClient(local), AsyncGatewayClient(NOWHERE)


def test_the_four_clients_are_typed_as_the_contract() -> None:
    local, remote, aio, aremote = _clients()
    sync_clients: list[Calls] = [local, remote]
    async_clients: list[AsyncCalls] = [aio, aremote]
    assert all(isinstance(client, Calls) for client in sync_clients)
    assert all(isinstance(client, AsyncCalls) for client in async_clients)
    remote.close()


def _members(protocol: type) -> list[str]:
    return sorted(
        name
        for name, value in vars(protocol).items()
        if not name.startswith("_") and inspect.isfunction(value)
    )


def _parameters(function: object) -> list[tuple[str, object, object]]:
    signature = inspect.signature(function)  # type: ignore[arg-type]
    return [
        (parameter.name, parameter.kind, parameter.default)
        for parameter in signature.parameters.values()
        if parameter.name != "self"
    ]


@pytest.mark.parametrize(
    ("protocol", "client"),
    [(Calls, Client), (Calls, GatewayClient), (AsyncCalls, AsyncClient),
     (AsyncCalls, AsyncGatewayClient)],
)  # fmt: skip
def test_every_operation_has_the_contracts_parameters_and_kind(
    protocol: type, client: type
) -> None:
    for name in _members(protocol):
        declared, made = getattr(protocol, name), getattr(client, name)
        assert _parameters(made)[: len(_parameters(declared))] == _parameters(declared), name
        extra = _parameters(made)[len(_parameters(declared)) :]
        assert all(default is not inspect.Parameter.empty for _, _, default in extra), name
        awaited = inspect.iscoroutinefunction(declared)
        assert inspect.iscoroutinefunction(made) == awaited, f"{client.__name__}.{name}"


def test_the_kit_drives_a_client_through_the_contract() -> None:
    adapter = ScriptedAdapter()
    runtime, _ = memory_runtime(adapter)
    hints = RecordingHints()
    client: Calls = Client(runtime=runtime, hints=hints)
    adapter.answers.append(envelopes.success)
    made = client.submit_call(adapter.tool, INPUT, "run_1/step_1")
    again = client.submit_call(adapter.tool, INPUT, "run_1/step_1")
    assert (made.created, again.created) == (True, False)
    assert hints.take() == [Hint("execute", "run_1/step_1")]
    assert client.settle("run_1/step_1", 0).state is StepState.PENDING
    assert [spec.name for spec in client.catalogue()] == [adapter.tool]
    assert (
        client.catalogue().get(adapter.tool).max_attempts
        == runtime.policy_for(adapter.tool).retry.max_attempts
    )


def test_the_gateway_clients_refuse_an_actor_the_key_would_override() -> None:
    remote = GatewayClient(NOWHERE)
    with pytest.raises(TypeError, match="actor is the key's"):
        remote.submit_call("t", {}, "r", actor="ana")
    remote.close()
