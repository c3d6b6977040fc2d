"""Settings from TOOLSAFE_* variables, the Celery config they give, and two apps at once."""

from __future__ import annotations

import pickle
from datetime import timedelta

import pytest

from toolsafe import celeryconfig
from toolsafe.settings import DEFAULT_BROKER_URL, Settings, SettingsError
from toolsafe.tasks.app import create_app


def test_defaults_without_environment() -> None:
    settings = Settings.from_env({})
    assert settings.broker_url == DEFAULT_BROKER_URL
    assert settings.database_url.startswith("sqlite:///")
    assert settings.adapter_modules == ("toolsafe.adapters.examples",)
    assert settings.faults_enabled is False
    # Short leases kept alive by a heartbeat: a dead worker is recovered in seconds.
    assert settings.lease <= 15
    assert settings.heartbeat_interval * 3 <= settings.lease


def test_values_are_read_and_typed() -> None:
    settings = Settings.from_env(
        {
            "TOOLSAFE_BROKER_URL": "redis://127.0.0.1:6379/7",
            "TOOLSAFE_DATABASE_URL": "postgresql://postgres@127.0.0.1/x",
            "TOOLSAFE_ADAPTERS": "a.b, c.d",
            "TOOLSAFE_LEASE_SECONDS": "12.5",
            "TOOLSAFE_TASK_TIME_LIMIT": "10",
            "TOOLSAFE_TASK_SOFT_TIME_LIMIT": "8",
            "TOOLSAFE_MAX_ETA": "30",
            "TOOLSAFE_VISIBILITY_TIMEOUT": "600",
            "TOOLSAFE_MAX_ATTEMPTS": "7",
            "TOOLSAFE_TOOL_POLICIES": '{"create_invoice": {"max_attempts": 2}}',
            "TOOLSAFE_FAULTS_ENABLED": "yes",
            "TOOLSAFE_FAULT_PLAN": "/tmp/plan.json",
            "TOOLSAFE_ESCALATION_HANDLERS": "my.mod:notify",
        }
    )
    assert settings.broker_url.endswith("/7")
    assert settings.adapter_modules == ("a.b", "c.d")
    assert settings.lease == 12.5
    assert settings.heartbeat_interval == 2.5  # a fifth of the lease when unset
    assert settings.policy_for("send_email").retry.max_attempts == 7
    assert settings.policy_for("create_invoice").retry.max_attempts == 2
    # An override keeps the other defaults of the environment.
    assert settings.policy_for("create_invoice").retry.base_delay == timedelta(seconds=1)
    assert settings.faults_enabled and settings.fault_state_dir == "/tmp/plan.json.fired"
    assert settings.escalation_handlers == ("my.mod:notify",)


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
        ("TOOLSAFE_VISIBILITY_TIMEOUT", "600", "at least 2 x"),
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
    assert config["worker_eta_task_limit"] == settings.worker_eta_task_limit
    assert {queue.name for queue in config["task_queues"]} == set(celeryconfig.QUEUES)
    assert config["task_routes"][celeryconfig.VERIFY_TASK] == {"queue": "toolsafe.verify"}
    assert config["beat_schedule"]["toolsafe-sweep"]["schedule"] == settings.sweep_interval
    # Every hard limit and the longest ETA stay well under the visibility timeout.
    limits = celeryconfig.task_limits(settings)
    assert set(limits) == {
        celeryconfig.EXECUTE_TASK,
        celeryconfig.VERIFY_TASK,
        celeryconfig.ESCALATE_TASK,
        celeryconfig.SWEEP_TASK,
    }
    longest = max(hard for _, hard in limits.values())
    assert settings.visibility_timeout >= 2 * (settings.max_eta + longest)


def test_config_refuses_a_visibility_timeout_under_a_task_limit() -> None:
    # Passes the Settings check (execute limit) but not the sweeper's longer limit.
    settings = Settings(
        task_time_limit=2,
        task_soft_time_limit=1,
        lease=3,
        heartbeat_interval=1,
        max_eta=1,
        visibility_timeout=8,
    )
    with pytest.raises(SettingsError, match="TOOLSAFE_VISIBILITY_TIMEOUT"):
        celeryconfig.build_config(settings)


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
        assert app.tasks["toolsafe.execute"].time_limit == app.settings.task_time_limit
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
