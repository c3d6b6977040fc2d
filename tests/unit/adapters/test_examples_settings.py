"""The example adapters' settings: defaults, and bad values named."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.services.adapters.test_examples import _close_adapters, opened  # noqa: F401
from toolsafe.adapters.examples import ExampleSettings, http_settings, register
from toolsafe.adapters.http import HttpAdapter, HttpSettings
from toolsafe.adapters.registry import Registry
from toolsafe.settings import Settings

MODULE = "toolsafe.adapters.examples"


def settings_from_env(env: dict[str, str]) -> tuple[HttpSettings, timedelta]:
    """The example adapters' settings as toolsafe's settings read them from ``env``."""
    read = Settings.from_env(env).adapter_settings()[MODULE]
    assert isinstance(read, ExampleSettings)
    return http_settings(read)


def test_defaults_and_bad_settings() -> None:
    settings, window = settings_from_env({})
    assert (settings.base_url, window) == ("http://127.0.0.1:8900", timedelta(seconds=2))
    with pytest.raises(ValueError, match="TOOLSAFE_EXAMPLE_CONSISTENCY_WINDOW"):
        settings_from_env({"TOOLSAFE_EXAMPLE_CONSISTENCY_WINDOW": "soon"})
    with pytest.raises(ValueError, match="TOOLSAFE_EXAMPLE_CONSISTENCY_WINDOW"):
        settings_from_env({"TOOLSAFE_EXAMPLE_CONSISTENCY_WINDOW": "-1"})
    with pytest.raises(ValueError, match="TOOLSAFE_EXAMPLE_DOWNSTREAM_URL"):
        settings_from_env({"TOOLSAFE_EXAMPLE_DOWNSTREAM_URL": "ftp://x"})
    registry = Registry()
    register(registry)
    assert registry.tools() == ("create_invoice", "send_email")
    for tool in registry.tools():
        registered = registry.get(tool)
        assert isinstance(registered, HttpAdapter)
        opened(registered)


def example_adapters(env: dict[str, str]) -> list[HttpAdapter[Any]]:
    read = Settings.from_env(env).adapter_settings()[MODULE]
    assert isinstance(read, ExampleSettings)
    registry = Registry()
    register(registry, read)
    found = []
    for name in registry.tools():
        adapter = registry.get(name)
        assert isinstance(adapter, HttpAdapter)
        found.append(opened(adapter))
    return found


def test_the_examples_declare_deduplicates_by_key_only_when_told() -> None:
    assert not any(adapter.deduplicates_by_key for adapter in example_adapters({}))
    told = example_adapters({"TOOLSAFE_EXAMPLE_DEDUPLICATES_BY_KEY": "true"})
    assert [adapter.deduplicates_by_key for adapter in told] == [True, True]
    # An instance's declaration is its own: the classes stay undeclared.
    assert not type(told[0]).deduplicates_by_key
    with pytest.raises(ValueError, match="TOOLSAFE_EXAMPLE_DEDUPLICATES_BY_KEY"):
        example_adapters({"TOOLSAFE_EXAMPLE_DEDUPLICATES_BY_KEY": "perhaps"})
