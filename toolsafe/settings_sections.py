"""The sections of :class:`toolsafe.settings.Settings`: one small frozen value per part of
toolsafe, with its defaults, the ``TOOLSAFE_*`` variable each field is read from, and the
checks that need no other section (those across sections are ``Settings.validate``'s)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import ClassVar, Final

from toolsafe.recovery.policy import KNOBS, Policy, PolicyError, knobs_of, policy_from_knobs
from toolsafe.settings_parse import DEFAULT_BROKER_URL, PREFIX, SettingsError

__all__ = [
    "DEFAULT_ADAPTERS",
    "DEFAULT_DATABASE_URL",
    "DEFAULT_METRICS_ADDRESS",
    "EARLY_WAIT_SHARE",
    "HEARTBEATS_PER_LEASE",
    "MAX_SUBMIT_WINDOW",
    "MIN_SESSION_KEY",
    "SUBMIT_HINTS",
    "BrokerSettings",
    "CallSettings",
    "EscalationSettings",
    "FaultSettings",
    "GatewaySettings",
    "MetricsSettings",
    "Policies",
    "PolicySettings",
    "Section",
    "StoreSettings",
    "SweepSettings",
    "ToolSettings",
    "knob_variable",
]

DEFAULT_DATABASE_URL: Final = "sqlite:///toolsafe.db"
DEFAULT_ADAPTERS: Final = "toolsafe.adapters.examples"
DEFAULT_METRICS_ADDRESS: Final = "127.0.0.1"
# A lease lasts at least this many heartbeats: one late or failed renewal never loses it.
HEARTBEATS_PER_LEASE: Final = 3
# The longest early wait is at most this share of the call's soft time limit: the wait
# runs inside that limit, before the claim, and the call keeps the rest of it.
EARLY_WAIT_SHARE: Final = 0.1
MIN_SESSION_KEY: Final = 32
"""The shortest TOOLSAFE_UI_SESSION_KEY accepted: 32 characters of random text."""
# A submit never waits longer than this for others to share its commit (a latency bound).
MAX_SUBMIT_WINDOW: Final = 0.05
# Who publishes a submitted step's hint (``TOOLSAFE_SUBMIT_HINTS``).
SUBMIT_HINTS: Final = ("direct", "relay")


def knob_variable(knob: str) -> str:
    """The variable of a policy knob: ``max_attempts`` → ``TOOLSAFE_MAX_ATTEMPTS``."""
    return PREFIX + knob.upper()


@dataclass(frozen=True)
class Section:
    """What every section shares: the variable each field is read from, and a check at
    construction that names the variable of the first bad value."""

    VARIABLES: ClassVar[Mapping[str, str]] = {}
    # The fields that must be greater than 0.
    POSITIVE: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        for name in self.POSITIVE:
            value: float = getattr(self, name)
            if value <= 0:
                raise SettingsError(self.VARIABLES[name], f"must be greater than 0, got {value}")
        self.check()

    def check(self) -> None:
        """The section's checks beyond a positive value; none by default."""

    @classmethod
    def variables(cls) -> tuple[str, ...]:
        """The ``TOOLSAFE_*`` variables this section is read from."""
        return tuple(cls.VARIABLES.values())


@dataclass(frozen=True)
class BrokerSettings(Section):
    """The Celery broker and what it holds: ETA messages, and unacked ones it redelivers
    after the visibility timeout (docs/operations.md, "The visibility timeout rule")."""

    url: str = DEFAULT_BROKER_URL
    result_backend: str | None = None
    visibility_timeout: float = 3600.0
    # The longest ETA the pipeline publishes. A longer delay is parked in the store and
    # released this long before it falls due by the release timer (tasks/release.py), so
    # a worker holds at most this much of the future as ETA messages (R6).
    max_eta: float = 10.0
    eta_jitter: float = 0.1
    worker_eta_task_limit: int = 1000

    VARIABLES: ClassVar[Mapping[str, str]] = {
        "url": "TOOLSAFE_BROKER_URL",
        "result_backend": "TOOLSAFE_RESULT_BACKEND",
        "visibility_timeout": "TOOLSAFE_VISIBILITY_TIMEOUT",
        "max_eta": "TOOLSAFE_MAX_ETA",
        "eta_jitter": "TOOLSAFE_ETA_JITTER",
        "worker_eta_task_limit": "TOOLSAFE_WORKER_ETA_TASK_LIMIT",
    }
    POSITIVE: ClassVar[tuple[str, ...]] = ("visibility_timeout", "max_eta", "worker_eta_task_limit")

    def check(self) -> None:
        if self.eta_jitter < 0:
            raise SettingsError("TOOLSAFE_ETA_JITTER", "must not be negative")


@dataclass(frozen=True)
class StoreSettings(Section):
    """The step store: where it is, how submits share a commit, how waiters learn of one."""

    url: str = DEFAULT_DATABASE_URL
    # How long a submit waits for others submitting at the same moment in this process
    # to share its transaction (group commit, tasks/submit_group.py); 0: each its own.
    submit_window: float = 0.001
    # Who publishes a submitted step's hint: the submitter right after its commit
    # ("direct"), or the workers' hint relay, woken by the change feed ("relay"; the
    # submit is then its commit alone: tasks/relay.py).
    submit_hints: str = "direct"
    # How often a process without LISTEN/NOTIFY (SQLite) looks for new step events.
    notify_poll_interval: float = 0.05

    VARIABLES: ClassVar[Mapping[str, str]] = {
        "url": "TOOLSAFE_DATABASE_URL",
        "submit_window": "TOOLSAFE_SUBMIT_WINDOW",
        "submit_hints": "TOOLSAFE_SUBMIT_HINTS",
        "notify_poll_interval": "TOOLSAFE_NOTIFY_POLL_INTERVAL",
    }
    POSITIVE: ClassVar[tuple[str, ...]] = ("notify_poll_interval",)

    def check(self) -> None:
        if not 0 <= self.submit_window <= MAX_SUBMIT_WINDOW:
            raise SettingsError(
                "TOOLSAFE_SUBMIT_WINDOW",
                f"must be between 0 and {MAX_SUBMIT_WINDOW} seconds, got {self.submit_window}",
            )
        if self.submit_hints not in SUBMIT_HINTS:
            raise SettingsError(
                "TOOLSAFE_SUBMIT_HINTS",
                f"must be one of {', '.join(SUBMIT_HINTS)}, got {self.submit_hints!r}",
            )

    @property
    def relays_hints(self) -> bool:
        """Whether submitted steps' hints go out through the workers' relay."""
        return self.submit_hints == "relay"


@dataclass(frozen=True)
class ToolSettings(Section):
    """The tools: the adapter modules that register them, and what toolsafe does with a
    tool call's input whatever the adapter says (its size, its secret fields)."""

    adapter_modules: tuple[str, ...] = (DEFAULT_ADAPTERS,)
    # toolsafe's own limit on a submitted input (canonical JSON), whatever the adapter's
    # model allows: a larger one is InvalidInput INPUT_TOO_LARGE, nothing stored or sent.
    max_input_bytes: int = 262_144
    # Fernet keys for secret input fields at rest, newest first: the first seals, every
    # one opens (rotation: put a new key first, drop an old one once nothing uses it).
    secret_keys: tuple[str, ...] = field(default=(), repr=False)

    VARIABLES: ClassVar[Mapping[str, str]] = {
        "adapter_modules": "TOOLSAFE_ADAPTERS",
        "max_input_bytes": "TOOLSAFE_MAX_INPUT_BYTES",
        "secret_keys": "TOOLSAFE_SECRET_KEYS",
    }
    POSITIVE: ClassVar[tuple[str, ...]] = ("max_input_bytes",)

    def check(self) -> None:
        if not self.adapter_modules:
            raise SettingsError("TOOLSAFE_ADAPTERS", "names no adapter module")


@dataclass(frozen=True)
class CallSettings(Section):
    """How a running adapter call (execute, verify) is held and bounded, in seconds."""

    # How long a claim holds a step without a heartbeat: a running call renews it every
    # heartbeat_interval, so a dead worker's step is recovered about a lease after it
    # died (at once when its host sees it die, docs/operations.md).
    lease: float = 15.0
    heartbeat_interval: float = 3.0
    time_limit: float = 60.0
    soft_time_limit: float = 50.0
    # How early, beyond twice its clock's measured uncertainty, a hint may find its step
    # and still be waited out by the worker that took it (tasks/early.py): the clocks'
    # drift between two measurements and the consuming worker's timer. A few
    # milliseconds, because the wait holds a pool slot (a prefork process, a thread) and
    # runs inside the call's time limit; an earlier hint is refused, and the sweeper
    # sends it again once it is due.
    early_wait: float = 0.005

    VARIABLES: ClassVar[Mapping[str, str]] = {
        "lease": "TOOLSAFE_LEASE_SECONDS",
        "heartbeat_interval": "TOOLSAFE_HEARTBEAT_INTERVAL",
        "time_limit": "TOOLSAFE_TASK_TIME_LIMIT",
        "soft_time_limit": "TOOLSAFE_TASK_SOFT_TIME_LIMIT",
        "early_wait": "TOOLSAFE_EARLY_WAIT",
    }
    POSITIVE: ClassVar[tuple[str, ...]] = (
        "lease",
        "heartbeat_interval",
        "time_limit",
        "soft_time_limit",
    )

    def check(self) -> None:
        if self.soft_time_limit >= self.time_limit:
            raise SettingsError(
                "TOOLSAFE_TASK_SOFT_TIME_LIMIT",
                f"must be below TOOLSAFE_TASK_TIME_LIMIT ({self.time_limit}s)",
            )
        if self.heartbeat_interval * HEARTBEATS_PER_LEASE > self.lease:
            raise SettingsError(
                "TOOLSAFE_HEARTBEAT_INTERVAL",
                f"must be at most TOOLSAFE_LEASE_SECONDS / {HEARTBEATS_PER_LEASE} "
                f"({self.lease / HEARTBEATS_PER_LEASE:g}s), got {self.heartbeat_interval:g}s: "
                "a live call must get several renewals in before its lease runs out",
            )
        if self.early_wait < 0:
            raise SettingsError(
                "TOOLSAFE_EARLY_WAIT", f"must not be negative, got {self.early_wait:g}s"
            )
        if self.early_wait > self.soft_time_limit * EARLY_WAIT_SHARE:
            raise SettingsError(
                "TOOLSAFE_EARLY_WAIT",
                f"must be at most TOOLSAFE_TASK_SOFT_TIME_LIMIT x {EARLY_WAIT_SHARE:g} "
                f"({self.soft_time_limit * EARLY_WAIT_SHARE:g}s), got {self.early_wait:g}s: "
                "the wait runs inside the call's time limit, before the call",
            )


@dataclass(frozen=True)
class SweepSettings(Section):
    """The sweeper beat runs: how often, how many steps a query, when a hint is lost."""

    interval: float = 5.0
    batch: int = 500
    # A due step whose hint went out this long ago without effect is published again.
    republish_after: float = 30.0

    VARIABLES: ClassVar[Mapping[str, str]] = {
        "interval": "TOOLSAFE_SWEEP_INTERVAL",
        "batch": "TOOLSAFE_SWEEP_BATCH",
        "republish_after": "TOOLSAFE_REPUBLISH_AFTER",
    }
    POSITIVE: ClassVar[tuple[str, ...]] = ("interval", "batch", "republish_after")


_DEFAULT_KNOBS: Final = knobs_of(Policy())


@dataclass(frozen=True)
class PolicySettings:
    """The knobs of :class:`toolsafe.recovery.policy.Policy`, in seconds and counts; the
    defaults and the checks are the policy's own."""

    max_attempts: int = int(_DEFAULT_KNOBS["max_attempts"])
    retry_base_delay: float = _DEFAULT_KNOBS["retry_base_delay"]
    retry_max_delay: float = _DEFAULT_KNOBS["retry_max_delay"]
    longest_wait: float = _DEFAULT_KNOBS["longest_wait"]
    verify_base_delay: float = _DEFAULT_KNOBS["verify_base_delay"]
    verify_max_delay: float = _DEFAULT_KNOBS["verify_max_delay"]
    max_lookups_unavailable: int = int(_DEFAULT_KNOBS["max_lookups_unavailable"])
    # Seconds an unknown outcome may stay unverifiable (lookup down) before it escalates.
    verify_budget: float = _DEFAULT_KNOBS["verify_budget"]
    loop_guard: int = int(_DEFAULT_KNOBS["loop_guard"])

    def policy(self) -> Policy:
        """Raises :class:`PolicyError` naming the knob of a value out of range."""
        return policy_from_knobs(self.knobs())

    def knobs(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_knobs(cls, values: Mapping[str, float]) -> PolicySettings:
        """From flat values (checked for type by the reader); missing ones stay default."""
        v = {**cls().knobs(), **values}
        return cls(
            max_attempts=int(v["max_attempts"]),
            retry_base_delay=v["retry_base_delay"],
            retry_max_delay=v["retry_max_delay"],
            longest_wait=v["longest_wait"],
            verify_base_delay=v["verify_base_delay"],
            verify_max_delay=v["verify_max_delay"],
            max_lookups_unavailable=int(v["max_lookups_unavailable"]),
            verify_budget=v["verify_budget"],
            loop_guard=int(v["loop_guard"]),
        )


@dataclass(frozen=True)
class Policies(Section):
    """The retry and verification policy: the default (``TOOLSAFE_<KNOB>``) and each
    tool's overrides (``TOOLSAFE_TOOL_POLICIES``, over the default)."""

    default: PolicySettings = field(default_factory=PolicySettings)
    per_tool: Mapping[str, PolicySettings] = field(default_factory=dict)

    VARIABLES: ClassVar[Mapping[str, str]] = {"per_tool": "TOOLSAFE_TOOL_POLICIES"}

    def check(self) -> None:
        for tool, values in {"": self.default, **self.per_tool}.items():
            try:
                values.policy()
            except PolicyError as error:
                name = (
                    f"TOOLSAFE_TOOL_POLICIES[{tool}].{error.knob}"
                    if tool
                    else knob_variable(error.knob)
                )
                raise SettingsError(name, error.problem) from None

    def for_tool(self, tool: str) -> Policy:
        return self.per_tool.get(tool, self.default).policy()

    @classmethod
    def variables(cls) -> tuple[str, ...]:
        return (*(knob_variable(knob) for knob in KNOBS), *cls.VARIABLES.values())


@dataclass(frozen=True)
class EscalationSettings(Section):
    """Where escalation notices go (tasks/escalation.py), and when one is sent again."""

    webhook_url: str | None = None
    webhook_timeout: float = 5.0
    handlers: tuple[str, ...] = ()
    # An escalation notice no handler run acknowledged is sent again after this long,
    # doubling after every send (at most 64 times this).
    resend_after: float = 60.0

    VARIABLES: ClassVar[Mapping[str, str]] = {
        "webhook_url": "TOOLSAFE_ESCALATION_WEBHOOK_URL",
        "webhook_timeout": "TOOLSAFE_ESCALATION_WEBHOOK_TIMEOUT",
        "handlers": "TOOLSAFE_ESCALATION_HANDLERS",
        "resend_after": "TOOLSAFE_ESCALATION_RESEND_AFTER",
    }
    POSITIVE: ClassVar[tuple[str, ...]] = ("webhook_timeout", "resend_after")


@dataclass(frozen=True)
class FaultSettings(Section):
    """The named fault points (tests and chaos runs only, docs/operations.md)."""

    enabled: bool = False
    plan: str | None = None
    state_dir: str | None = None

    VARIABLES: ClassVar[Mapping[str, str]] = {
        "enabled": "TOOLSAFE_FAULTS_ENABLED",
        "plan": "TOOLSAFE_FAULT_PLAN",
        "state_dir": "TOOLSAFE_FAULT_STATE_DIR",
    }

    def check(self) -> None:
        if self.enabled and not self.plan:
            raise SettingsError(
                "TOOLSAFE_FAULT_PLAN", "is required when TOOLSAFE_FAULTS_ENABLED is on"
            )


@dataclass(frozen=True)
class MetricsSettings(Section):
    """The store-wide exporter (``toolsafe metrics``): its port (None: the command needs
    --port) and address, how often it folds new events, and how long it waits for an
    event id that was skipped over to commit before taking it for rolled back."""

    port: int | None = None
    address: str = DEFAULT_METRICS_ADDRESS
    poll_interval: float = 1.0
    gap_timeout: float = 60.0

    VARIABLES: ClassVar[Mapping[str, str]] = {
        "port": "TOOLSAFE_METRICS_PORT",
        "address": "TOOLSAFE_METRICS_ADDRESS",
        "poll_interval": "TOOLSAFE_METRICS_POLL_INTERVAL",
        "gap_timeout": "TOOLSAFE_METRICS_GAP_SECONDS",
    }
    POSITIVE: ClassVar[tuple[str, ...]] = ("poll_interval", "gap_timeout")


@dataclass(frozen=True)
class GatewaySettings(Section):
    """The agent-facing surface: the HTTP gateway (``toolsafe serve``, docs/gateway.md),
    its status page and the MCP server (``toolsafe mcp``, docs/mcp.md)."""

    max_body: int = 1_048_576
    max_header: int = 16_384
    max_wait: float = 60.0
    max_waits: int = 1000
    # Bad keys: failed checks per key id and source address within the window, then 429;
    # scrypt verifications of tokens not yet verified that run at once.
    auth_failures: int = 10
    auth_window: float = 60.0
    auth_verifiers: int = 2
    # How long an MCP tools/call (without a task) waits for the step to need the agent
    # before it answers "still in progress".
    mcp_wait: float = 20.0
    # Signs the status page's session cookies (docs/status-page.md); unset, each gateway
    # process makes its own, so a restart signs everyone out.
    ui_session_key: str | None = field(default=None, repr=False)

    VARIABLES: ClassVar[Mapping[str, str]] = {
        "max_body": "TOOLSAFE_GATEWAY_MAX_BODY_BYTES",
        "max_header": "TOOLSAFE_GATEWAY_MAX_HEADER_BYTES",
        "max_wait": "TOOLSAFE_GATEWAY_MAX_WAIT",
        "max_waits": "TOOLSAFE_GATEWAY_MAX_WAITS",
        "auth_failures": "TOOLSAFE_GATEWAY_AUTH_FAILURES",
        "auth_window": "TOOLSAFE_GATEWAY_AUTH_WINDOW",
        "auth_verifiers": "TOOLSAFE_GATEWAY_AUTH_VERIFIERS",
        "mcp_wait": "TOOLSAFE_MCP_WAIT",
        "ui_session_key": "TOOLSAFE_UI_SESSION_KEY",
    }
    POSITIVE: ClassVar[tuple[str, ...]] = (
        "max_body",
        "max_header",
        "max_wait",
        "max_waits",
        "auth_failures",
        "auth_window",
        "auth_verifiers",
        "mcp_wait",
    )

    def check(self) -> None:
        if self.ui_session_key is not None and len(self.ui_session_key) < MIN_SESSION_KEY:
            raise SettingsError(
                "TOOLSAFE_UI_SESSION_KEY",
                f"must be at least {MIN_SESSION_KEY} characters of random text "
                f"(`python -c 'import secrets; print(secrets.token_urlsafe(32))'`), "
                f"got {len(self.ui_session_key)}",
            )
