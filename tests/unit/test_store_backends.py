"""One way into the store: ``open_store`` picks the backend by the URL's scheme (the
shipped ones, one registered in the process, one a package declares as an entry point),
and a backend without an optional feature says so, naming itself and the feature, in
one error, wherever the feature is asked for (the gateway's keys, the status page, the
metrics exporter, purge and key rotation)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from tests.support.recovery import journal_store
from tests.support.recovery.journal_store import JournalStore
from tests.support.tasks.memory_support import INPUT, TOOL, RecordingHints, ScriptedAdapter
from toolsafe.adapters.registry import Registry
from toolsafe.cli.exits import EXIT_USAGE
from toolsafe.cli.main import main
from toolsafe.gateway.app import create_gateway
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import (
    Backend,
    FeatureMissing,
    StoreOptions,
    UnknownStore,
    known_schemes,
    open_store,
    register_store,
)
from toolsafe.recovery.store.backend import ENTRY_POINT_GROUP, scheme_of
from toolsafe.recovery.store.memory import MemoryStore
from toolsafe.settings import Settings, SettingsError
from toolsafe.tasks.client import Client
from toolsafe.tasks.runtime import Runtime

FEATURES = ("keys", "overview", "tally", "retention", "loop_reads")


@pytest.fixture(autouse=True)
def journal() -> None:
    journal_store.register()


def test_the_scheme_picks_the_backend() -> None:
    memory = open_store("memory://")
    assert memory.name == "memory" and isinstance(memory.steps, MemoryStore)
    assert open_store("memory://").steps is not memory.steps  # each URL a store of its own
    journal = open_store("journal://a")
    assert journal.name == "journal" and isinstance(journal.steps, JournalStore)
    assert {"memory", "sqlite", "postgresql", "postgres", "journal"} <= set(known_schemes())
    assert scheme_of("postgresql+psycopg://u@h/db") == "postgresql+psycopg"
    assert scheme_of("SQLite:///x.db") == "sqlite"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://u@h/db", "no store backend for mysql://; the known ones are "),
        ("mysql+pymysql://u@h/db", "no store backend for mysql+pymysql://"),
        ("steps.db", "a store URL needs a scheme, one of "),
        ("://x", "a store URL needs a scheme"),
    ],
)
def test_a_url_no_backend_serves_is_refused_by_name(url: str, message: str) -> None:
    with pytest.raises(UnknownStore) as raised:
        open_store(url)
    assert message in str(raised.value)
    assert "memory://" in str(raised.value) and "postgresql://" in str(raised.value)


def test_the_settings_refuse_a_store_url_no_backend_serves() -> None:
    with pytest.raises(SettingsError, match=r"TOOLSAFE_DATABASE_URL.*known schemes: .*memory://"):
        Settings.from_env({"TOOLSAFE_DATABASE_URL": "mysql://u@h/db"})
    assert Settings.from_env({"TOOLSAFE_DATABASE_URL": "journal://x"}).store.url == "journal://x"


def test_a_scheme_registered_in_the_process_comes_first() -> None:
    opened: list[tuple[str, StoreOptions]] = []

    def opener(url: str, options: StoreOptions) -> Backend:
        opened.append((url, options))
        return journal_store.open_journal(url, options)

    register_store("postgresql+test", opener)
    options = StoreOptions(pre_ping=False, poll_interval=1.0)
    backend = open_store("postgresql+test://u@h/db", options)
    assert backend.name == "journal" and opened == [("postgresql+test://u@h/db", options)]
    with pytest.raises(ValueError, match="lower case, without '://'"):
        register_store("Bad://", opener)


def test_a_package_adds_a_backend_with_an_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a package's ``[project.entry-points."toolsafe.stores"]`` installs."""
    info = tmp_path / "toolsafe_ledger-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toolsafe-ledger\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nledger = {journal_store.OPENER}\n", encoding="utf-8"
    )
    assert "ledger" not in known_schemes()
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "ledger" in known_schemes()
    backend = open_store("ledger+v2://anything")
    assert isinstance(backend.steps, JournalStore)


def test_each_missing_feature_is_one_error_naming_backend_and_feature() -> None:
    backend = open_store("journal://features")
    for feature in FEATURES:
        assert not backend.has(feature)
        with pytest.raises(FeatureMissing) as raised:
            getattr(backend, feature)
        error = raised.value
        assert (error.backend, error.feature) == ("journal", feature)
        assert str(error).startswith(f"the journal store has no {feature} (")
    with pytest.raises(ValueError, match="unknown store feature 'metrics'"):
        backend.has("metrics")
    assert repr(backend) == "<Backend journal with no optional features>"


# ----------------------------------------------------------------- the rooms above


def _journal_client() -> tuple[Client, JournalStore]:
    registry = Registry()
    registry.register(ScriptedAdapter())
    runtime = Runtime(Settings().replace(store={"url": "journal://gateway"}), registry=registry)
    store = runtime.store
    assert isinstance(store, JournalStore)
    return Client(runtime=runtime, hints=RecordingHints()), store


def test_the_gateway_refuses_keys_and_the_status_page_but_serves_calls() -> None:
    client, store = _journal_client()
    settings = client.runtime.settings
    with pytest.raises(FeatureMissing, match="the journal store has no keys"):
        create_gateway(settings, client=client)
    app = create_gateway(settings, client=client, auth=False)

    async def visit() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            submitted = await http.post(
                f"/v1/tools/{TOOL}/calls", json={"input": INPUT}, headers={"Idempotency-Key": "r1"}
            )
            viewed = await http.get("/v1/calls/r1")
            page = await http.get("/ui/")
            return submitted, viewed, page

    submitted, viewed, page = asyncio.run(visit())
    assert submitted.status_code == 201 and viewed.status_code == 200
    assert viewed.json()["operation_ref"] == "r1" and viewed.json()["state"] == "pending"
    assert store.get("r1").state is StepState.PENDING and "r1" in store.journal
    assert page.status_code == 501
    assert page.text.startswith("the status page is not available: the journal store has no")
    assert "overview" in page.text


@pytest.mark.parametrize(
    ("command", "feature"),
    [
        (["purge", "--older-than", "1d"], "retention"),
        (["metrics", "--port", "0"], "tally"),
        (["stats", "--prometheus"], "tally"),
    ],
)
def test_the_operators_commands_refuse_in_one_line(
    command: list[str],
    feature: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("TOOLSAFE_DATABASE_URL", "journal://cli")
    assert main(command) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"toolsafe: error: the journal store has no {feature} (")
    assert err.count("\n") == 1


def test_migrate_on_a_store_without_a_database_refuses_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TOOLSAFE_DATABASE_URL", "memory://")
    assert main(["migrate"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err == (
        "toolsafe: error: the memory store has no migrations (a database schema for "
        "toolsafe migrate); use a store that has it, such as postgresql:// or sqlite:///path\n"
    )
