"""A write cannot declare what it cannot know: mapping an exception that can be raised
after the request may have left to a not-committed code is refused when the adapter is
made (``@tool``) or registered (the HTTP toolkit's hooks), naming the exception, the
code and the rule; ``before_send`` declares the exceptions raised only before sending."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

import httpx
import pytest

from toolsafe import Raised, read_tool, tool
from toolsafe.adapters import codes
from toolsafe.adapters.envelope import ToolError
from toolsafe.adapters.examples.invoice import CreateInvoice
from toolsafe.adapters.function import FunctionAdapter
from toolsafe.adapters.http import HttpSettings
from toolsafe.adapters.registry import Registry
from toolsafe.adapters.sending import UnknowableMapping, after_send, may_follow_send


def _foreign(module: str, name: str) -> type[Exception]:
    """A class as a client library defines it, without the library installed here."""
    klass = type(name, (Exception,), {"__module__": module})
    return klass


def _write(errors: dict[type[BaseException], str | Raised], **options: Any) -> FunctionAdapter:
    def charge(amount_cents: int, operation_ref: str) -> dict[str, str]:
        """Charge."""
        return {"id": "ch_1"}

    return tool(errors=errors, lookup=lambda ref: None, **options)(charge)


def test_the_issues_own_mapping_is_refused_naming_the_exception_the_code_and_the_rule() -> None:
    with pytest.raises(UnknowableMapping) as caught:
        _write({httpx.TimeoutException: codes.DEPENDENCY_UNAVAILABLE})
    message = str(caught.value)
    assert "httpx.TimeoutException" in message
    assert "DEPENDENCY_UNAVAILABLE (not_committed)" in message
    assert "can be raised after the request may have left" in message
    assert "never not_committed" in message and "before_send={TimeoutException}" in message
    assert isinstance(caught.value, TypeError)


@pytest.mark.parametrize(
    "raised",
    [
        httpx.ReadTimeout,
        httpx.RemoteProtocolError,
        httpx.HTTPError,
        _foreign("requests.exceptions", "ReadTimeout"),
        _foreign("requests.exceptions", "ConnectionError"),
        _foreign("aiohttp.client_exceptions", "ServerDisconnectedError"),
        _foreign("grpc._channel", "_InactiveRpcError"),
        _foreign("grpc", "RpcError"),
        _foreign("botocore.exceptions", "ReadTimeoutError"),
        _foreign("botocore.exceptions", "ConnectionClosedError"),
        _foreign("urllib3.exceptions", "ProtocolError"),
        TimeoutError,
        ConnectionResetError,
        BrokenPipeError,
        ConnectionError,
        OSError,
        Exception,
    ],
    ids=lambda klass: f"{klass.__module__}.{klass.__name__}",
)
def test_every_family_of_maybe_sent_exceptions_is_refused(raised: type[Exception]) -> None:
    with pytest.raises(UnknowableMapping, match=raised.__name__):
        _write({raised: codes.DEPENDENCY_UNAVAILABLE})


@pytest.mark.parametrize(
    "raised",
    [
        httpx.ConnectError,
        httpx.ConnectTimeout,
        httpx.PoolTimeout,
        ConnectionRefusedError,
        _foreign("requests.exceptions", "ConnectTimeout"),
        _foreign("aiohttp.client_exceptions", "ClientConnectorError"),
        _foreign("botocore.exceptions", "EndpointConnectionError"),
        _foreign("billing_sdk", "CardDeclined"),
    ],
    ids=lambda klass: f"{klass.__module__}.{klass.__name__}",
)
def test_exceptions_raised_before_sending_or_unknown_to_toolsafe_may_be_not_committed(
    raised: type[Exception],
) -> None:
    adapter = _write({raised: codes.DEPENDENCY_UNAVAILABLE})
    Registry().register(adapter)
    assert adapter.errors == {raised: codes.DEPENDENCY_UNAVAILABLE}


def test_a_subclass_inherits_its_family_and_a_more_specific_before_send_class_wins() -> None:
    class SdkReadTimeout(httpx.ReadTimeout):
        pass

    class SdkConnectTimeout(httpx.ConnectTimeout):
        pass

    assert may_follow_send(SdkReadTimeout) is not None
    assert may_follow_send(SdkConnectTimeout) is None
    with pytest.raises(UnknowableMapping, match="SdkReadTimeout"):
        _write({SdkReadTimeout: codes.RATE_LIMITED})


def test_a_class_the_author_marks_is_refused_and_so_are_its_subclasses() -> None:
    @after_send
    class LedgerTimeout(Exception):
        pass

    class LedgerSlowAnswer(LedgerTimeout):
        pass

    for raised in (LedgerTimeout, LedgerSlowAnswer):
        with pytest.raises(UnknowableMapping, match="marked after_send"):
            _write({raised: Raised(codes.DEPENDENCY_UNAVAILABLE)})
    with pytest.raises(TypeError, match="built-in"):
        after_send(TimeoutError)


def test_before_send_declares_the_exception_raised_only_before_sending() -> None:
    adapter = _write(
        {httpx.TimeoutException: codes.DEPENDENCY_UNAVAILABLE},
        before_send={httpx.TimeoutException},
    )
    assert adapter.before_send == (httpx.TimeoutException,)
    Registry().register(adapter)
    with pytest.raises(TypeError, match="not an exception type"):
        _write({}, before_send={"ReadTimeout"})


def test_unknown_is_always_allowed_and_reads_are_not_judged() -> None:
    _write({httpx.ReadTimeout: codes.OUTCOME_UNKNOWN, TimeoutError: codes.OUTCOME_UNKNOWN})

    @read_tool(errors={TimeoutError: codes.DEPENDENCY_UNAVAILABLE})
    def balance(account: str) -> dict[str, int]:
        """Balance."""
        return {"cents": 1}

    Registry().register(balance)


def test_a_hand_built_function_adapter_is_refused_at_registration() -> None:
    adapter = _write({})
    klass = type("Built", (type(adapter),), {"errors": {TimeoutError: codes.RATE_LIMITED}})
    built = klass(adapter.function, None, model_param=None, ref_param="operation_ref",
                  context_param=None)  # fmt: skip
    with pytest.raises(UnknowableMapping, match="TimeoutError to RATE_LIMITED"):
        Registry().register(built)


class TimeoutMeansNothingSent(CreateInvoice):
    tool: ClassVar[str] = "timeout_means_nothing_sent"

    def classify_exception(
        self, error: BaseException, operation_ref: str, attempts_left: int
    ) -> ToolError:
        if isinstance(error, httpx.TimeoutException):
            return self.error(
                codes.DEPENDENCY_UNAVAILABLE,
                operation_ref,
                {"reason": "timeout"},
                not_before=datetime.now(UTC),
                attempts_left=attempts_left,
            )
        return super().classify_exception(error, operation_ref, attempts_left)


def test_the_http_toolkits_hook_is_probed_at_registration() -> None:
    settings = HttpSettings(base_url="http://127.0.0.1:9")
    Registry().register(CreateInvoice(settings))
    with pytest.raises(UnknowableMapping) as caught:
        Registry().register(TimeoutMeansNothingSent(settings))
    message = str(caught.value)
    assert "TimeoutMeansNothingSent.classify_exception maps httpx.ReadTimeout" in message
    assert "DEPENDENCY_UNAVAILABLE (not_committed)" in message

    class Declared(TimeoutMeansNothingSent):
        tool: ClassVar[str] = "declared_before_send"
        before_send: ClassVar[tuple[type[BaseException], ...]] = (
            httpx.ReadTimeout,
            httpx.WriteTimeout,
        )

    Registry().register(Declared(settings))


def test_the_kit_reads_one_modules_settings_as_a_worker_does() -> None:
    from toolsafe.settings import SettingsError, module_settings

    read = module_settings(
        "toolsafe.adapters.examples", {"TOOLSAFE_EXAMPLE_DOWNSTREAM_URL": "http://staging:1"}
    )
    assert read is not None and read.model_dump()["downstream_url"] == "http://staging:1"
    assert module_settings("tests.support.conformance.adapters", {}) is None
    with pytest.raises(SettingsError, match="TOOLSAFE_EXAMPLE_DOWNSTREAM_URL"):
        module_settings("toolsafe.adapters.examples", {"TOOLSAFE_EXAMPLE_DOWNSTREAM_URL": "ftp:x"})
