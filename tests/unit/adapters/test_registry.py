"""The registry: tool names to adapters, filled from TOOLSAFE_ADAPTERS modules."""

from __future__ import annotations

import pickle
import sys
import types
from collections.abc import Iterator

import pytest
from pydantic import BaseModel

from tests.support.fixtures import invoice_created
from toolsafe.adapters.envelope import AnySuccess, ToolError
from toolsafe.adapters.errors import AdapterLoadError, DuplicateToolError, UnknownToolError
from toolsafe.adapters.protocol import Adapter, CallContext
from toolsafe.adapters.registry import Registry, parse_module_list
from toolsafe.adapters.sending import UnknowableMapping
from toolsafe.conformance import TargetNotNamed


class EchoInput(BaseModel):
    text: str


class Echo(Adapter[EchoInput]):
    tool = "echo"
    writes = False
    input_model = EchoInput

    def execute(
        self, data: EchoInput, operation_ref: str, context: CallContext
    ) -> AnySuccess | ToolError:
        return invoice_created()


@pytest.fixture
def plugin_module() -> Iterator[str]:
    module = types.ModuleType("toolsafe_test_plugin")

    def register(registry: Registry) -> None:
        registry.register(Echo())

    module.register = register  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    yield module.__name__
    del sys.modules[module.__name__]


def test_register_and_get() -> None:
    registry = Registry()
    adapter = Echo()
    registry.register(adapter)
    assert registry.get("echo") is adapter
    assert "echo" in registry
    assert registry.tools() == ("echo",)


def test_unknown_tool_names_the_tool_and_the_known_ones() -> None:
    registry = Registry()
    registry.register(Echo())
    with pytest.raises(
        UnknownToolError, match=r"unknown tool 'create_invoce'; registered tools: echo"
    ):
        registry.get("create_invoce")


def test_duplicate_tool_is_refused() -> None:
    registry = Registry()
    registry.register(Echo())
    with pytest.raises(DuplicateToolError, match="'echo' is already registered"):
        registry.register(Echo())


def test_load_modules_calls_register(plugin_module: str) -> None:
    registry = Registry()
    registry.load_modules(parse_module_list(f" {plugin_module} , "))
    assert registry.tools() == ("echo",)


def test_missing_module_is_a_clear_error() -> None:
    with pytest.raises(AdapterLoadError, match="cannot load adapter module 'no_such_module_xyz'"):
        Registry().load_modules(["no_such_module_xyz"])


def test_module_without_register_is_a_clear_error() -> None:
    with pytest.raises(AdapterLoadError, match=r"'json'.*no register\(registry\) function"):
        Registry().load_modules(["json"])


def test_parse_module_list() -> None:
    assert parse_module_list("a.b, c.d,,") == ("a.b", "c.d")
    assert parse_module_list("") == ()


@pytest.mark.parametrize(
    "error",
    [
        UnknownToolError("x", ("a", "b")),
        AdapterLoadError("m", "boom"),
        DuplicateToolError("t"),
        UnknowableMapping("t", "errors=", TimeoutError, "RATE_LIMITED", "a timeout", "x"),
        TargetNotNamed("'t' writes, and the kit sends its writes only to a target you name"),
    ],
)
def test_errors_survive_pickling(error: Exception) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
