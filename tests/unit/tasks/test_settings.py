"""Settings from TOOLSAFE_* variables, the Celery config they give, and two apps at once."""

from __future__ import annotations

import dataclasses
import os
import pickle
import re
import sys
import types
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, Field

from tests.support.fixtures import invoice_created
from toolsafe import celeryconfig
from toolsafe.adapters.envelope import AnySuccess, ToolError
from toolsafe.adapters.protocol import Adapter, CallContext
from toolsafe.adapters.registry import AdapterSettings, Registry
from toolsafe.recovery.policy import KNOBS, Policy
from toolsafe.settings import (
    DEFAULT_BROKER_URL,
    POLICY_KEYS,
    VISIBILITY_RULE,
    BrokerSettings,
    CallSettings,
    GatewaySettings,
    MetricsSettings,
    Policies,
    PolicySettings,
    Settings,
    SettingsError,
    SweepSettings,
    known_variables,
    load_settings,
    required_visibility_timeout,
)
from toolsafe.tasks.app import create_app

ROOT = Path(__file__).resolve().parents[3]


def test_defaults_without_environment() -> None:
    settings = Settings.from_env({})
    assert settings.broker.url == DEFAULT_BROKER_URL
    assert settings.store.url.startswith("sqlite:///")
    assert settings.tools.adapter_modules == ("toolsafe.adapters.examples",)
    assert settings.faults.enabled is False
    # Short leases kept alive by a heartbeat: a dead worker is recovered in seconds.
    assert settings.calls.lease <= 15
    assert settings.calls.heartbeat_interval * 3 <= settings.calls.lease
    # An early hint is waited out for a few milliseconds beyond the clocks' uncertainty.
    assert settings.calls.early_wait == 0.005


def test_values_are_read_and_typed() -> None:
    settings = Settings.from_env(
        {
            "TOOLSAFE_BROKER_URL": "redis://127.0.0.1:6379/7",
            "TOOLSAFE_DATABASE_URL": "postgresql://postgres@127.0.0.1/x",
            "TOOLSAFE_ADAPTERS": "a.b, c.d",
            "TOOLSAFE_LEASE_SECONDS": "12.5",
            "TOOLSAFE_TASK_TIME_LIMIT": "10",
            "TOOLSAFE_TASK_SOFT_TIME_LIMIT": "8",
            "TOOLSAFE_EARLY_WAIT": "0.5",
            "TOOLSAFE_MAX_ETA": "30",
            "TOOLSAFE_VISIBILITY_TIMEOUT": "600",
            "TOOLSAFE_MAX_ATTEMPTS": "7",
            "TOOLSAFE_TOOL_POLICIES": '{"create_invoice": {"max_attempts": 2}}',
            "TOOLSAFE_FAULTS_ENABLED": "yes",
            "TOOLSAFE_FAULT_PLAN": "/tmp/plan.json",
            "TOOLSAFE_ESCALATION_HANDLERS": "my.mod:notify",
        }
    )
    assert settings.broker.url.endswith("/7")
    assert settings.tools.adapter_modules == ("a.b", "c.d")
    assert settings.calls.lease == 12.5
    assert settings.calls.heartbeat_interval == 2.5  # a fifth of the lease when unset
    assert settings.calls.early_wait == 0.5
    assert settings.policies.for_tool("send_email").retry.max_attempts == 7
    assert settings.policies.for_tool("create_invoice").retry.max_attempts == 2
    # An override keeps the other defaults of the environment.
    assert settings.policies.for_tool("create_invoice").retry.base_delay == timedelta(seconds=1)
    assert settings.faults.enabled and settings.faults.state_dir == "/tmp/plan.json.fired"
    assert settings.escalation.handlers == ("my.mod:notify",)


@pytest.mark.parametrize(
    ("variable", "value", "needle"),
    [
        ("TOOLSAFE_LEASE_SECONDS", "soon", "number of seconds"),
        ("TOOLSAFE_LEASE_SECONDS", "nan", "finite"),
        ("TOOLSAFE_MAX_ATTEMPTS", "2.5", "whole number"),
        ("TOOLSAFE_MAX_ATTEMPTS", "0", "at least 1"),
        ("TOOLSAFE_HEARTBEAT_INTERVAL", "6", "at most TOOLSAFE_LEASE_SECONDS / 3"),
        ("TOOLSAFE_HEARTBEAT_INTERVAL", "0", "greater than 0"),
        ("TOOLSAFE_TASK_SOFT_TIME_LIMIT", "70", "below TOOLSAFE_TASK_TIME_LIMIT"),
        ("TOOLSAFE_EARLY_WAIT", "-0.001", "must not be negative"),
        ("TOOLSAFE_EARLY_WAIT", "5.01", "at most TOOLSAFE_TASK_SOFT_TIME_LIMIT x 0.1 (5s)"),
        ("TOOLSAFE_VISIBILITY_TIMEOUT", "100", "at least 2 x"),
        ("TOOLSAFE_SWEEP_INTERVAL", "0", "greater than 0"),
        ("TOOLSAFE_FAULTS_ENABLED", "maybe", "1/0"),
        ("TOOLSAFE_FAULTS_ENABLED", "1", "TOOLSAFE_FAULT_PLAN"),
        ("TOOLSAFE_ESCALATION_WEBHOOK_URL", "ftp://x", "http"),
        ("TOOLSAFE_ESCALATION_HANDLERS", "nomodule", "import path"),
        ("TOOLSAFE_TOOL_POLICIES", "[1]", "JSON object"),
        ("TOOLSAFE_TOOL_POLICIES", "{bad", "JSON object"),
        ("TOOLSAFE_TOOL_POLICIES", '{"t": {"max_tries": 1}}', "unknown keys max_tries"),
        ("TOOLSAFE_TOOL_POLICIES", '{"t": {"max_attempts": "3"}}', "whole number"),
        ("TOOLSAFE_TOOL_POLICIES", '{"t": {"loop_guard": 0}}', "loop_guard"),
        ("TOOLSAFE_ADAPTERS", " , ", "names no adapter module"),
    ],
)
def test_bad_values_name_their_variable(variable: str, value: str, needle: str) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({variable: value})
    message = str(caught.value)
    assert needle in message
    expected = "TOOLSAFE_FAULT_PLAN" if needle == "TOOLSAFE_FAULT_PLAN" else variable
    assert message.startswith(expected)


def test_settings_error_survives_pickling() -> None:
    error = SettingsError("TOOLSAFE_X", "is wrong")
    again = pickle.loads(pickle.dumps(error))
    assert str(again) == str(error) and again.variable == "TOOLSAFE_X"


def test_config_follows_the_durability_rules() -> None:
    settings = Settings.from_env({"TOOLSAFE_VISIBILITY_TIMEOUT": "5000"})
    config = celeryconfig.build_config(settings)
    assert config["task_acks_late"] is True
    assert config["task_reject_on_worker_lost"] is True
    assert config["worker_prefetch_multiplier"] == 1
    assert config["broker_transport_options"] == {"visibility_timeout": 5000.0}
    assert config["result_backend_transport_options"] == {"visibility_timeout": 5000.0}
    assert config["worker_send_task_events"] and config["task_send_sent_event"]
    assert config["worker_eta_task_limit"] == settings.broker.worker_eta_task_limit
    assert {queue.name for queue in config["task_queues"]} == set(celeryconfig.QUEUES)
    assert config["task_routes"][celeryconfig.VERIFY_TASK] == {"queue": "toolsafe.verify"}
    assert config["beat_schedule"]["toolsafe-sweep"]["schedule"] == settings.sweep.interval
    # Every hard limit and the longest ETA stay well under the visibility timeout.
    limits = celeryconfig.task_limits(settings)
    assert set(limits) == {
        celeryconfig.EXECUTE_TASK,
        celeryconfig.VERIFY_TASK,
        celeryconfig.ESCALATE_TASK,
        celeryconfig.SWEEP_TASK,
    }
    longest = max(hard for _, hard in limits.values())
    assert settings.broker.visibility_timeout >= 2 * (settings.broker.max_eta + longest)


def test_config_refuses_a_visibility_timeout_under_a_task_limit() -> None:
    # Above the execute limit but not the sweeper's longer one: the one visibility rule
    # (in Settings) counts every task's limit, so these settings cannot even be built.
    with pytest.raises(SettingsError, match="TOOLSAFE_VISIBILITY_TIMEOUT"):
        celeryconfig.build_config(
            Settings().replace(
                calls={"time_limit": 2, "soft_time_limit": 1, "lease": 3, "heartbeat_interval": 1},
                broker={"max_eta": 1, "visibility_timeout": 8},
            )
        )


def test_two_apps_with_their_own_settings_in_one_process() -> None:
    first = create_app(Settings.from_env({"TOOLSAFE_BROKER_URL": "redis://127.0.0.1:6379/3"}))
    second = create_app(
        Settings.from_env(
            {"TOOLSAFE_BROKER_URL": "amqp://guest@127.0.0.1//", "TOOLSAFE_MAX_ATTEMPTS": "2"}
        )
    )
    assert first.conf.broker_url.endswith("/3")
    assert second.conf.broker_url.startswith("amqp://")
    assert first.runtime is not second.runtime
    assert second.runtime.policy_for("x").retry.max_attempts == 2
    for app in (first, second):
        names = {name for name in app.tasks if name.startswith("toolsafe.")}
        assert names == {
            "toolsafe.execute",
            "toolsafe.verify",
            "toolsafe.escalate",
            "toolsafe.sweep",
        }
        assert app.tasks["toolsafe.execute"].app is app
        assert app.tasks["toolsafe.execute"].acks_late is True
        assert app.tasks["toolsafe.execute"].time_limit == app.settings.calls.time_limit
    assert first.tasks["toolsafe.execute"] is not second.tasks["toolsafe.execute"]


def test_celery_finds_the_default_app_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    from celery.app.utils import find_app

    import toolsafe.tasks.app

    monkeypatch.setenv("TOOLSAFE_BROKER_URL", "redis://127.0.0.1:6379/9")
    monkeypatch.setattr(toolsafe.tasks.app, "_default", None)
    found = find_app("toolsafe")
    assert isinstance(found, toolsafe.tasks.app.ToolsafeApp)
    assert found.conf.broker_url.endswith("/9")
    assert find_app("toolsafe") is found


# ----------------------------------------------------------------------------- adapter settings


class AcmeSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str = Field(pattern=r"^https?://", description="an http:// or https:// URL")
    retries: int = Field(default=3, ge=0, description="a whole number from 0")


class Acme(Adapter[AcmeSettings]):
    tool = "acme_lookup"
    writes = False
    input_model = AcmeSettings

    def __init__(self, settings: AcmeSettings) -> None:
        self.settings = settings

    def execute(
        self, data: AcmeSettings, operation_ref: str, context: CallContext
    ) -> AnySuccess | ToolError:
        return invoice_created()


@pytest.fixture
def acme_module() -> Iterator[str]:
    """A user's adapter module that declares settings of its own."""
    module = types.ModuleType("acme_tools_for_test")
    received: list[AcmeSettings] = []

    def register(registry: Registry, settings: AcmeSettings) -> None:
        received.append(settings)
        registry.register(Acme(settings))

    module.register = register  # type: ignore[attr-defined]
    module.ADAPTER_SETTINGS = AdapterSettings(prefix="ACME", model=AcmeSettings)  # type: ignore[attr-defined]
    module.received = received  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    yield module.__name__
    del sys.modules[module.__name__]


def test_an_adapter_module_receives_the_settings_read_for_it(acme_module: str) -> None:
    before = dict(os.environ)
    env = {
        "TOOLSAFE_ADAPTERS": f"toolsafe.adapters.examples, {acme_module}",
        "TOOLSAFE_ACME_BASE_URL": "https://acme.example",
        "TOOLSAFE_ACME_RETRIES": "5",
    }
    settings = load_settings(env)
    assert settings.adapter_settings()[acme_module] == AcmeSettings(
        base_url="https://acme.example", retries=5
    )
    registry = Registry()
    registry.load_modules(settings.tools.adapter_modules, settings.adapter_settings())
    adapter = registry.get("acme_lookup")
    assert isinstance(adapter, Acme) and adapter.settings.retries == 5
    # Modules without settings keep the one-argument register(registry).
    assert "create_invoice" in registry
    assert {"TOOLSAFE_ACME_BASE_URL", "TOOLSAFE_ACME_RETRIES"} <= set(known_variables(env))
    assert dict(os.environ) == before  # read from the mapping given, nothing written


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"TOOLSAFE_ACME_BASE_URL": "https://acme.example", "TOOLSAFE_ACME_RETRIES": "-1"},
            "TOOLSAFE_ACME_RETRIES: must be a whole number from 0, got '-1'",
        ),
        (
            {"TOOLSAFE_ACME_BASE_URL": "acme.example"},
            "TOOLSAFE_ACME_BASE_URL: must be an http:// or https:// URL, got 'acme.example'",
        ),
        ({}, "TOOLSAFE_ACME_BASE_URL: is required: an http:// or https:// URL"),
    ],
)
def test_a_bad_adapter_setting_names_its_variable_and_form(
    acme_module: str, env: dict[str, str], message: str
) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings({"TOOLSAFE_ADAPTERS": acme_module, **env})
    assert str(caught.value) == message


def test_adapter_settings_may_not_shadow_a_toolsafe_setting(acme_module: str) -> None:
    class Eta(BaseModel):
        eta: float = 1.0

    sys.modules[acme_module].ADAPTER_SETTINGS = AdapterSettings(prefix="MAX", model=Eta)  # type: ignore[attr-defined]
    with pytest.raises(SettingsError, match="reads TOOLSAFE_MAX_ETA, a toolsafe setting"):
        load_settings({"TOOLSAFE_ADAPTERS": acme_module})
    with pytest.raises(ValueError, match="upper case"):
        AdapterSettings(prefix="acme", model=Eta)


def test_a_module_without_a_register_for_its_settings_is_refused(acme_module: str) -> None:
    sys.modules[acme_module].ADAPTER_SETTINGS = {"prefix": "ACME"}  # type: ignore[attr-defined]
    with pytest.raises(SettingsError, match="ADAPTER_SETTINGS must be an AdapterSettings"):
        load_settings({"TOOLSAFE_ADAPTERS": acme_module})


def test_the_registry_gives_defaults_when_no_settings_were_read() -> None:
    registry = Registry()
    registry.load_modules(["toolsafe.adapters.examples"])
    invoice = registry.get("create_invoice")
    assert invoice.consistency_window == timedelta(seconds=2)


# ----------------------------------------------------------------------------- one home


def test_policy_defaults_come_from_the_policy_itself() -> None:
    assert Settings.from_env({}).policies.for_tool("any_tool") == Policy()
    assert Settings().policies.for_tool("any_tool") == Policy()
    assert PolicySettings().policy() == Policy()
    assert POLICY_KEYS == KNOBS


def test_the_visibility_rule_is_the_documented_one() -> None:
    page = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    assert f"`{VISIBILITY_RULE}`" in page
    right = VISIBILITY_RULE.split("≥", 1)[1].replace("×", "*")
    for env in (
        {},
        {"TOOLSAFE_MAX_ETA": "30", "TOOLSAFE_ETA_JITTER": "0.5", "TOOLSAFE_TASK_TIME_LIMIT": "2",
         "TOOLSAFE_TASK_SOFT_TIME_LIMIT": "1", "TOOLSAFE_LEASE_SECONDS": "3"},
        {"TOOLSAFE_SWEEP_INTERVAL": "20", "TOOLSAFE_ESCALATION_WEBHOOK_TIMEOUT": "40"},
        {"TOOLSAFE_TASK_TIME_LIMIT": "300", "TOOLSAFE_TASK_SOFT_TIME_LIMIT": "290",
         "TOOLSAFE_LEASE_SECONDS": "400", "TOOLSAFE_VISIBILITY_TIMEOUT": "5000"},
    ):  # fmt: skip
        settings = Settings.from_env(env)
        values = {
            "TOOLSAFE_MAX_ETA": settings.broker.max_eta,
            "TOOLSAFE_ETA_JITTER": settings.broker.eta_jitter,
            "TOOLSAFE_TASK_TIME_LIMIT": settings.calls.time_limit,
            "TOOLSAFE_ESCALATION_WEBHOOK_TIMEOUT": settings.escalation.webhook_timeout,
            "TOOLSAFE_SWEEP_INTERVAL": settings.sweep.interval,
        }
        expression = right
        for name in sorted(values, key=len, reverse=True):
            expression = expression.replace(name, repr(values[name]))
        documented = eval(expression, {"__builtins__": {"max": max}})  # noqa: S307 - our own doc
        needed = required_visibility_timeout(settings)
        assert needed == pytest.approx(documented)
        # The check refuses exactly what the rule does.
        Settings.from_env({**env, "TOOLSAFE_VISIBILITY_TIMEOUT": repr(needed)})
        with pytest.raises(SettingsError, match="TOOLSAFE_VISIBILITY_TIMEOUT"):
            Settings.from_env({**env, "TOOLSAFE_VISIBILITY_TIMEOUT": repr(needed - 0.01)})


# ----------------------------------------------------------------------------- sections

NO_SETTINGS_MODULE = "tests.support.conformance.adapters"
PROCESS_WIDE = {"operator": "TOOLSAFE_OPERATOR", "log_json": "TOOLSAFE_LOG_FORMAT"}


def test_every_variable_belongs_to_one_section() -> None:
    sections = Settings().sections()
    assert list(sections) == [
        "broker", "store", "tools", "calls", "sweep", "policies", "escalation", "faults",
        "metrics", "gateway",
    ]  # fmt: skip
    listed = [v for section in sections.values() for v in section.variables()]
    listed += PROCESS_WIDE.values()
    assert len(listed) == len(set(listed))
    # Those toolsafe reads itself: an adapter module that declares no settings of its own.
    assert set(listed) == set(known_variables({"TOOLSAFE_ADAPTERS": NO_SETTINGS_MODULE}))
    for section in sections.values():
        names = {f.name for f in dataclasses.fields(section)}
        assert set(section.VARIABLES) <= names
        if not isinstance(section, Policies):
            assert set(section.VARIABLES) == names, type(section).__name__


def test_each_section_is_read_from_its_own_variables() -> None:
    # A value set for each field's variable lands in that field and no other.
    settings = Settings.from_env(
        {
            "TOOLSAFE_METRICS_PORT": "9101",
            "TOOLSAFE_GATEWAY_MAX_WAITS": "7",
            "TOOLSAFE_SWEEP_BATCH": "9",
        }
    )
    assert settings.metrics == MetricsSettings(port=9101)
    assert settings.gateway == GatewaySettings(max_waits=7)
    assert settings.sweep == SweepSettings(batch=9)
    assert settings.broker == BrokerSettings()


def test_replace_changes_fields_inside_sections_and_checks_again() -> None:
    settings = Settings().replace(
        sweep={"batch": 2}, calls={"lease": 4.0, "heartbeat_interval": 1.0}
    )
    assert settings.sweep == SweepSettings(batch=2)
    assert (settings.calls.lease, settings.calls.heartbeat_interval) == (4.0, 1.0)
    assert settings.calls.time_limit == CallSettings().time_limit
    assert settings.broker == Settings().broker
    # The section's own checks and the rule across sections both run again.
    with pytest.raises(SettingsError, match=r"^TOOLSAFE_SWEEP_BATCH: must be greater than 0"):
        settings.replace(sweep={"batch": 0})
    with pytest.raises(SettingsError, match=r"^TOOLSAFE_HEARTBEAT_INTERVAL: must be at most"):
        settings.replace(calls={"heartbeat_interval": 2.0})
    with pytest.raises(SettingsError, match=r"^TOOLSAFE_VISIBILITY_TIMEOUT"):
        settings.replace(broker={"visibility_timeout": 10.0})
    with pytest.raises(TypeError, match="no section 'lease'"):
        settings.replace(lease={"seconds": 3})
    with pytest.raises(TypeError, match="batch_size"):
        settings.replace(sweep={"batch_size": 3})


def test_the_settings_table_is_grouped_by_section() -> None:
    page = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    settings = Settings()
    for name, section in settings.sections().items():
        table = _table_after(page, f"**`settings.{name}`")
        assert table == set(section.variables()), name
    assert _table_after(page, "**Every process") == set(PROCESS_WIDE.values())


def _table_after(page: str, title: str) -> set[str]:
    """The variables of the table under the line that starts with ``title``."""
    assert title in page, title
    found: set[str] = set()
    for line in page.split(title, 1)[1].split("\n\n", 2)[1].splitlines():
        found.update(re.findall(r"`(TOOLSAFE_[A-Z_]+)`", line.split("|")[1]))
    return found
