"""The pipeline's unit tests' world: a scripted adapter, the memory runtime and its
store, and a publisher that records (a module's own fixture of the same name wins)."""

from __future__ import annotations

import pytest

from tests.support.tasks.memory_support import RecordingHints, ScriptedAdapter, memory_runtime
from toolsafe.recovery.store.memory import MemoryStore
from toolsafe.tasks.runtime import Runtime


@pytest.fixture
def adapter() -> ScriptedAdapter:
    return ScriptedAdapter()


@pytest.fixture
def setup(adapter: ScriptedAdapter) -> tuple[Runtime, MemoryStore]:
    # The memory store itself (not the port): these tests read its events directly.
    runtime, store = memory_runtime(adapter)
    assert isinstance(store, MemoryStore)
    return runtime, store


@pytest.fixture
def runtime(setup: tuple[Runtime, MemoryStore]) -> Runtime:
    return setup[0]


@pytest.fixture
def store(setup: tuple[Runtime, MemoryStore]) -> MemoryStore:
    return setup[1]


@pytest.fixture
def hints() -> RecordingHints:
    return RecordingHints()
