"""Settings of a toolsafe deployment, read once from ``TOOLSAFE_*`` environment variables.

Nothing here is read at import time: ``Settings.from_env()`` builds a frozen value that
the Celery app, the client and the CLI are given, so a test can build a second one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import timedelta
from typing import Final

from toolsafe.adapters.errors import ToolsafeError
from toolsafe.adapters.registry import parse_module_list
from toolsafe.recovery.policy import Policy, RetryPolicy, VerificationPolicy

DEFAULT_BROKER_URL: Final = "redis://127.0.0.1:6379/0"
DEFAULT_DATABASE_URL: Final = "sqlite:///toolsafe.db"
DEFAULT_ADAPTERS: Final = "toolsafe.adapters.examples"
# A lease lasts at least this many heartbeats: one late or failed renewal never loses it.
HEARTBEATS_PER_LEASE: Final = 3

# Keys accepted in TOOLSAFE_TOOL_POLICIES and their TOOLSAFE_* default variable.
POLICY_KEYS: Final = (
    "max_attempts",
    "retry_base_delay",
    "retry_max_delay",
    "longest_wait",
    "verify_base_delay",
    "verify_max_delay",
    "max_lookups_unavailable",
    "loop_guard",
)


class SettingsError(ToolsafeError, ValueError):
    """A ``TOOLSAFE_*`` variable has a value toolsafe cannot use."""

    def __init__(self, variable: str, problem: str) -> None:
        super().__init__(variable, problem)
        self.variable = variable
        self.problem = problem

    def __str__(self) -> str:
        return f"{self.variable}: {self.problem}"


@dataclass(frozen=True)
class PolicySettings:
    """The knobs of :class:`toolsafe.recovery.policy.Policy`, in seconds and counts."""

    max_attempts: int = 5
    retry_base_delay: float = 1.0
    retry_max_delay: float = 300.0
    longest_wait: float = 86_400.0
    verify_base_delay: float = 0.5
    verify_max_delay: float = 30.0
    max_lookups_unavailable: int = 5
    loop_guard: int = 3

    def policy(self) -> Policy:
        return Policy(
            retry=RetryPolicy(
                max_attempts=self.max_attempts,
                base_delay=timedelta(seconds=self.retry_base_delay),
                max_delay=timedelta(seconds=self.retry_max_delay),
                longest_wait=timedelta(seconds=self.longest_wait),
            ),
            verification=VerificationPolicy(
                base_delay=timedelta(seconds=self.verify_base_delay),
                max_delay=timedelta(seconds=self.verify_max_delay),
                max_unavailable=self.max_lookups_unavailable,
            ),
            loop_guard=self.loop_guard,
        )


@dataclass(frozen=True)
class Settings:
    """Everything a worker, beat, the client and the CLI need; times in seconds."""

    broker_url: str = DEFAULT_BROKER_URL
    result_backend: str | None = None
    database_url: str = DEFAULT_DATABASE_URL
    adapter_modules: tuple[str, ...] = (DEFAULT_ADAPTERS,)
    # How long a claim holds a step without a heartbeat: a running call renews it every
    # heartbeat_interval, so a dead worker's step is recovered about a lease after it
    # died (at once when its host sees it die, docs/operations.md).
    lease: float = 15.0
    heartbeat_interval: float = 3.0
    task_time_limit: float = 60.0
    task_soft_time_limit: float = 50.0
    sweep_interval: float = 5.0
    sweep_batch: int = 500
    # A due step whose hint went out this long ago without effect is published again.
    republish_after: float = 30.0
    # The longest ETA the pipeline publishes; later work waits for the sweeper (R6).
    max_eta: float = 600.0
    eta_jitter: float = 0.1
    visibility_timeout: float = 3600.0
    worker_eta_task_limit: int = 1000
    policy: PolicySettings = field(default_factory=PolicySettings)
    tool_policies: Mapping[str, PolicySettings] = field(default_factory=dict)
    escalation_webhook_url: str | None = None
    escalation_webhook_timeout: float = 5.0
    escalation_handlers: tuple[str, ...] = ()
    faults_enabled: bool = False
    fault_plan: str | None = None
    fault_state_dir: str | None = None
    log_json: bool = False

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Refuse combinations that break the durability rules (DESIGN §4, §8)."""
        positive = {
            "TOOLSAFE_LEASE_SECONDS": self.lease,
            "TOOLSAFE_HEARTBEAT_INTERVAL": self.heartbeat_interval,
            "TOOLSAFE_TASK_TIME_LIMIT": self.task_time_limit,
            "TOOLSAFE_TASK_SOFT_TIME_LIMIT": self.task_soft_time_limit,
            "TOOLSAFE_SWEEP_INTERVAL": self.sweep_interval,
            "TOOLSAFE_REPUBLISH_AFTER": self.republish_after,
            "TOOLSAFE_MAX_ETA": self.max_eta,
            "TOOLSAFE_VISIBILITY_TIMEOUT": self.visibility_timeout,
            "TOOLSAFE_ESCALATION_WEBHOOK_TIMEOUT": self.escalation_webhook_timeout,
            "TOOLSAFE_SWEEP_BATCH": self.sweep_batch,
            "TOOLSAFE_WORKER_ETA_TASK_LIMIT": self.worker_eta_task_limit,
        }
        for name, value in positive.items():
            if value <= 0:
                raise SettingsError(name, f"must be greater than 0, got {value}")
        if self.eta_jitter < 0:
            raise SettingsError("TOOLSAFE_ETA_JITTER", "must not be negative")
        if self.task_soft_time_limit >= self.task_time_limit:
            raise SettingsError(
                "TOOLSAFE_TASK_SOFT_TIME_LIMIT",
                f"must be below TOOLSAFE_TASK_TIME_LIMIT ({self.task_time_limit}s)",
            )
        if self.heartbeat_interval * HEARTBEATS_PER_LEASE > self.lease:
            raise SettingsError(
                "TOOLSAFE_HEARTBEAT_INTERVAL",
                f"must be at most TOOLSAFE_LEASE_SECONDS / {HEARTBEATS_PER_LEASE} "
                f"({self.lease / HEARTBEATS_PER_LEASE:g}s), got {self.heartbeat_interval:g}s: "
                "a live call must get several renewals in before its lease runs out",
            )
        needed = 2 * (self.max_eta + self.eta_jitter + self.task_time_limit)
        if self.visibility_timeout < needed:
            raise SettingsError(
                "TOOLSAFE_VISIBILITY_TIMEOUT",
                f"must be at least 2 x (TOOLSAFE_MAX_ETA + TOOLSAFE_ETA_JITTER + "
                f"TOOLSAFE_TASK_TIME_LIMIT) = {needed:g}s, got {self.visibility_timeout:g}s; "
                "otherwise the broker redelivers held ETA and running messages",
            )
        if not self.adapter_modules:
            raise SettingsError("TOOLSAFE_ADAPTERS", "names no adapter module")
        if self.faults_enabled and not self.fault_plan:
            raise SettingsError(
                "TOOLSAFE_FAULT_PLAN", "is required when TOOLSAFE_FAULTS_ENABLED is on"
            )
        for tool, values in {"": self.policy, **self.tool_policies}.items():
            _check_policy(values, tool)

    def policy_for(self, tool: str) -> Policy:
        return self.tool_policies.get(tool, self.policy).policy()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Build the settings from ``TOOLSAFE_*`` variables; a bad value names its variable."""
        env = os.environ if environ is None else environ
        reader = _Reader(env)
        base = PolicySettings(
            max_attempts=reader.integer("TOOLSAFE_MAX_ATTEMPTS", 5),
            retry_base_delay=reader.number("TOOLSAFE_RETRY_BASE_DELAY", 1.0),
            retry_max_delay=reader.number("TOOLSAFE_RETRY_MAX_DELAY", 300.0),
            longest_wait=reader.number("TOOLSAFE_LONGEST_WAIT", 86_400.0),
            verify_base_delay=reader.number("TOOLSAFE_VERIFY_BASE_DELAY", 0.5),
            verify_max_delay=reader.number("TOOLSAFE_VERIFY_MAX_DELAY", 30.0),
            max_lookups_unavailable=reader.integer("TOOLSAFE_MAX_LOOKUPS_UNAVAILABLE", 5),
            loop_guard=reader.integer("TOOLSAFE_LOOP_GUARD", 3),
        )
        # Unset, the heartbeat beats five times a lease, whatever lease was chosen.
        lease = reader.number("TOOLSAFE_LEASE_SECONDS", 15.0)
        fault_plan = reader.text("TOOLSAFE_FAULT_PLAN")
        state_dir = reader.text("TOOLSAFE_FAULT_STATE_DIR")
        if fault_plan and not state_dir:
            state_dir = fault_plan + ".fired"
        return cls(
            broker_url=reader.text("TOOLSAFE_BROKER_URL") or DEFAULT_BROKER_URL,
            result_backend=reader.text("TOOLSAFE_RESULT_BACKEND"),
            database_url=reader.text("TOOLSAFE_DATABASE_URL") or DEFAULT_DATABASE_URL,
            adapter_modules=parse_module_list(env.get("TOOLSAFE_ADAPTERS", DEFAULT_ADAPTERS)),
            lease=lease,
            heartbeat_interval=reader.number("TOOLSAFE_HEARTBEAT_INTERVAL", lease / 5),
            task_time_limit=reader.number("TOOLSAFE_TASK_TIME_LIMIT", 60.0),
            task_soft_time_limit=reader.number("TOOLSAFE_TASK_SOFT_TIME_LIMIT", 50.0),
            sweep_interval=reader.number("TOOLSAFE_SWEEP_INTERVAL", 5.0),
            sweep_batch=reader.integer("TOOLSAFE_SWEEP_BATCH", 500),
            republish_after=reader.number("TOOLSAFE_REPUBLISH_AFTER", 30.0),
            max_eta=reader.number("TOOLSAFE_MAX_ETA", 600.0),
            eta_jitter=reader.number("TOOLSAFE_ETA_JITTER", 0.1),
            visibility_timeout=reader.number("TOOLSAFE_VISIBILITY_TIMEOUT", 3600.0),
            worker_eta_task_limit=reader.integer("TOOLSAFE_WORKER_ETA_TASK_LIMIT", 1000),
            policy=base,
            tool_policies=reader.tool_policies("TOOLSAFE_TOOL_POLICIES", base),
            escalation_webhook_url=reader.url("TOOLSAFE_ESCALATION_WEBHOOK_URL"),
            escalation_webhook_timeout=reader.number("TOOLSAFE_ESCALATION_WEBHOOK_TIMEOUT", 5.0),
            escalation_handlers=reader.handlers("TOOLSAFE_ESCALATION_HANDLERS"),
            faults_enabled=reader.flag("TOOLSAFE_FAULTS_ENABLED"),
            fault_plan=fault_plan,
            fault_state_dir=state_dir,
            log_json=(env.get("TOOLSAFE_LOG_FORMAT", "text").strip().lower() == "json"),
        )


def _check_policy(values: PolicySettings, tool: str) -> None:
    where = f"TOOLSAFE_TOOL_POLICIES[{tool}]" if tool else "TOOLSAFE_"
    checks: list[tuple[str, bool, str]] = [
        ("MAX_ATTEMPTS", values.max_attempts >= 1, "must be at least 1"),
        ("RETRY_BASE_DELAY", values.retry_base_delay >= 0, "must not be negative"),
        ("RETRY_MAX_DELAY", values.retry_max_delay >= values.retry_base_delay,
         "must be at least the base delay"),
        ("LONGEST_WAIT", values.longest_wait > 0, "must be greater than 0"),
        ("VERIFY_BASE_DELAY", values.verify_base_delay >= 0, "must not be negative"),
        ("VERIFY_MAX_DELAY", values.verify_max_delay >= values.verify_base_delay,
         "must be at least the verification base delay"),
        ("MAX_LOOKUPS_UNAVAILABLE", values.max_lookups_unavailable >= 1, "must be at least 1"),
        ("LOOP_GUARD", values.loop_guard >= 1, "must be at least 1"),
    ]  # fmt: skip
    for suffix, ok, problem in checks:
        if not ok:
            name = f"{where}.{suffix.lower()}" if tool else f"{where}{suffix}"
            raise SettingsError(name, problem)


class _Reader:
    """Parses variables one by one so that every error names the variable."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env

    def text(self, name: str) -> str | None:
        value = self.env.get(name, "").strip()
        return value or None

    def number(self, name: str, default: float) -> float:
        raw = self.text(name)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            raise SettingsError(name, f"must be a number of seconds, got {raw!r}") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise SettingsError(name, f"must be a finite number, got {raw!r}")
        return value

    def integer(self, name: str, default: int) -> int:
        raw = self.text(name)
        if raw is None:
            return default
        try:
            return int(raw)
        except ValueError:
            raise SettingsError(name, f"must be a whole number, got {raw!r}") from None

    def flag(self, name: str) -> bool:
        raw = (self.text(name) or "0").lower()
        if raw in {"1", "true", "yes", "on"}:
            return True
        if raw in {"0", "false", "no", "off"}:
            return False
        raise SettingsError(name, f"must be 1/0, true/false, yes/no or on/off, got {raw!r}")

    def url(self, name: str) -> str | None:
        raw = self.text(name)
        if raw is not None and not raw.startswith(("http://", "https://")):
            raise SettingsError(name, "must be an http:// or https:// URL")
        return raw

    def handlers(self, name: str) -> tuple[str, ...]:
        found = parse_module_list(self.env.get(name, ""))
        for path in found:
            module, _, attribute = path.partition(":")
            if not module or not attribute:
                raise SettingsError(
                    name, f"{path!r} must be an import path like 'package.module:function'"
                )
        return found

    def tool_policies(self, name: str, base: PolicySettings) -> dict[str, PolicySettings]:
        raw = self.text(name)
        if raw is None:
            return {}
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as error:
            raise SettingsError(name, f"must be a JSON object: {error.msg}") from None
        if not isinstance(data, dict):
            raise SettingsError(name, 'must be a JSON object {"tool": {"max_attempts": 3}}')
        known = {f.name: f.type for f in fields(PolicySettings)}
        result: dict[str, PolicySettings] = {}
        for tool, overrides in data.items():
            if not isinstance(overrides, dict):
                raise SettingsError(f"{name}[{tool}]", "must be a JSON object of policy values")
            unknown = sorted(set(overrides) - set(known))
            if unknown:
                raise SettingsError(
                    f"{name}[{tool}]",
                    f"unknown keys {', '.join(unknown)}; known: {', '.join(POLICY_KEYS)}",
                )
            for key, value in overrides.items():
                whole = known[key] in ("int", int)
                valid = isinstance(value, int) if whole else isinstance(value, int | float)
                if isinstance(value, bool) or not valid:
                    kind = "a whole number" if whole else "a number"
                    raise SettingsError(f"{name}[{tool}].{key}", f"must be {kind}")
            result[str(tool)] = replace(base, **overrides)
        return result
