"""Settings of a toolsafe deployment, read once from ``TOOLSAFE_*`` environment variables.

The one module of the package that reads the environment. Nothing here is read at import
time: ``Settings.from_env()`` builds a frozen value that the Celery app, the client and
the CLI are given, so a test can build a second one; ``load_settings()`` also imports the
adapter modules and reads their own settings (``TOOLSAFE_<PREFIX>_<FIELD>``), which is
what every process does at start (``load_settings_or_exit()``: one line, exit code 2).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Final

from pydantic import BaseModel

from toolsafe.adapters.errors import AdapterLoadError, ToolsafeError
from toolsafe.adapters.registry import (
    AdapterSettings,
    Registry,
    declared_settings,
    import_adapter_module,
)
from toolsafe.recovery.policy import KNOBS, Policy, PolicyError, knobs_of, policy_from_knobs
from toolsafe.settings_parse import (
    DEFAULT_BROKER_URL,
    PREFIX,
    Reader,
    SettingsError,
    filesystem_folder,
    import_object,
    read_model,
    variable_name,
)

__all__ = [
    "DEFAULT_ADAPTERS",
    "DEFAULT_BROKER_URL",
    "DEFAULT_DATABASE_URL",
    "POLICY_KEYS",
    "VISIBILITY_RULE",
    "PolicySettings",
    "Settings",
    "SettingsError",
    "check_visibility",
    "child_environ",
    "filesystem_folder",
    "import_object",
    "known_variables",
    "load_settings",
    "load_settings_or_exit",
    "required_visibility_timeout",
]

DEFAULT_DATABASE_URL: Final = "sqlite:///toolsafe.db"
DEFAULT_ADAPTERS: Final = "toolsafe.adapters.examples"
DEFAULT_METRICS_ADDRESS: Final = "127.0.0.1"
# A lease lasts at least this many heartbeats: one late or failed renewal never loses it.
HEARTBEATS_PER_LEASE: Final = 3
MIN_SESSION_KEY: Final = 32
"""The shortest TOOLSAFE_UI_SESSION_KEY accepted: 32 characters of random text."""
# A submit never waits longer than this for others to share its commit (a latency bound).
MAX_SUBMIT_WINDOW: Final = 0.05

# Keys accepted in TOOLSAFE_TOOL_POLICIES; each is also TOOLSAFE_<KEY>, the default.
POLICY_KEYS: Final = KNOBS

# The rule between the broker's visibility timeout and what a worker holds on purpose
# (docs/operations.md quotes it; required_visibility_timeout computes it).
VISIBILITY_RULE: Final = (
    "TOOLSAFE_VISIBILITY_TIMEOUT ≥ 2 × (TOOLSAFE_MAX_ETA + TOOLSAFE_ETA_JITTER"
    " + max(TOOLSAFE_TASK_TIME_LIMIT, 2 × TOOLSAFE_ESCALATION_WEBHOOK_TIMEOUT + 10,"
    " max(4 × TOOLSAFE_SWEEP_INTERVAL, 30) + 5))"
)


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
    # The longest ETA the pipeline publishes. A longer delay is parked in the store and
    # released this long before it falls due by the release timer (tasks/release.py), so
    # a worker holds at most this much of the future as ETA messages (R6).
    max_eta: float = 10.0
    eta_jitter: float = 0.1
    # How long a submit waits for others submitting at the same moment in this process
    # to share its transaction (group commit, tasks/submit_group.py); 0: each its own.
    submit_window: float = 0.001
    visibility_timeout: float = 3600.0
    worker_eta_task_limit: int = 1000
    policy: PolicySettings = field(default_factory=PolicySettings)
    tool_policies: Mapping[str, PolicySettings] = field(default_factory=dict)
    escalation_webhook_url: str | None = None
    escalation_webhook_timeout: float = 5.0
    escalation_handlers: tuple[str, ...] = ()
    # An escalation notice no handler run acknowledged is sent again after this long,
    # doubling after every send (at most 64 times this).
    escalation_resend_after: float = 60.0
    faults_enabled: bool = False
    fault_plan: str | None = None
    fault_state_dir: str | None = None
    log_json: bool = False
    # The store-wide exporter (``toolsafe metrics``): its port (None: the command
    # needs --port), how often it folds new events, and how long it waits for an event
    # id that was skipped over to commit before taking it for rolled back.
    metrics_port: int | None = None
    metrics_address: str = DEFAULT_METRICS_ADDRESS
    metrics_poll_interval: float = 1.0
    metrics_gap_timeout: float = 60.0
    # The name the CLI records for approvals and resolutions (None: the OS user).
    operator: str | None = None
    # The TOOLSAFE_* variables this value was read from: the adapter modules' own
    # settings are read from here, never from the process's environment again.
    environ: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    # toolsafe's own limit on a submitted input (canonical JSON), whatever the adapter's
    # model allows: a larger one is InvalidInput INPUT_TOO_LARGE, nothing stored or sent.
    max_input_bytes: int = 262_144
    # Fernet keys for secret input fields at rest, newest first: the first seals, every
    # one opens (rotation: put a new key first, drop an old one once nothing uses it).
    secret_keys: tuple[str, ...] = field(default=(), repr=False)
    # The HTTP gateway (``toolsafe serve``, docs/gateway.md).
    gateway_max_body: int = 1_048_576
    gateway_max_header: int = 16_384
    gateway_max_wait: float = 60.0
    gateway_max_waits: int = 1000
    # Bad keys: failed checks per key id and source address within the window, then 429;
    # scrypt verifications of tokens not yet verified that run at once.
    gateway_auth_failures: int = 10
    gateway_auth_window: float = 60.0
    gateway_auth_verifiers: int = 2
    # How long an MCP tools/call (without a task) waits for the step to need the agent
    # before it answers "still in progress" (``toolsafe mcp``, docs/mcp.md).
    mcp_wait: float = 20.0
    # Signs the status page's session cookies (docs/status-page.md); unset, each gateway
    # process makes its own, so a restart signs everyone out.
    ui_session_key: str | None = field(default=None, repr=False)
    # How often a process without LISTEN/NOTIFY (SQLite) looks for new step events.
    notify_poll_interval: float = 0.05

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
            "TOOLSAFE_ESCALATION_RESEND_AFTER": self.escalation_resend_after,
            "TOOLSAFE_SWEEP_BATCH": self.sweep_batch,
            "TOOLSAFE_WORKER_ETA_TASK_LIMIT": self.worker_eta_task_limit,
            "TOOLSAFE_MAX_INPUT_BYTES": self.max_input_bytes,
            "TOOLSAFE_GATEWAY_MAX_BODY_BYTES": self.gateway_max_body,
            "TOOLSAFE_GATEWAY_MAX_HEADER_BYTES": self.gateway_max_header,
            "TOOLSAFE_GATEWAY_MAX_WAIT": self.gateway_max_wait,
            "TOOLSAFE_GATEWAY_MAX_WAITS": self.gateway_max_waits,
            "TOOLSAFE_GATEWAY_AUTH_FAILURES": self.gateway_auth_failures,
            "TOOLSAFE_GATEWAY_AUTH_WINDOW": self.gateway_auth_window,
            "TOOLSAFE_GATEWAY_AUTH_VERIFIERS": self.gateway_auth_verifiers,
            "TOOLSAFE_MCP_WAIT": self.mcp_wait,
            "TOOLSAFE_NOTIFY_POLL_INTERVAL": self.notify_poll_interval,
            "TOOLSAFE_METRICS_POLL_INTERVAL": self.metrics_poll_interval,
            "TOOLSAFE_METRICS_GAP_SECONDS": self.metrics_gap_timeout,
        }
        for name, value in positive.items():
            if value <= 0:
                raise SettingsError(name, f"must be greater than 0, got {value}")
        if self.eta_jitter < 0:
            raise SettingsError("TOOLSAFE_ETA_JITTER", "must not be negative")
        if not 0 <= self.submit_window <= MAX_SUBMIT_WINDOW:
            raise SettingsError(
                "TOOLSAFE_SUBMIT_WINDOW",
                f"must be between 0 and {MAX_SUBMIT_WINDOW} seconds, got {self.submit_window}",
            )
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
        check_visibility(self)
        if self.ui_session_key is not None and len(self.ui_session_key) < MIN_SESSION_KEY:
            raise SettingsError(
                "TOOLSAFE_UI_SESSION_KEY",
                f"must be at least {MIN_SESSION_KEY} characters of random text "
                f"(`python -c 'import secrets; print(secrets.token_urlsafe(32))'`), "
                f"got {len(self.ui_session_key)}",
            )
        if not self.adapter_modules:
            raise SettingsError("TOOLSAFE_ADAPTERS", "names no adapter module")
        if self.faults_enabled and not self.fault_plan:
            raise SettingsError(
                "TOOLSAFE_FAULT_PLAN", "is required when TOOLSAFE_FAULTS_ENABLED is on"
            )
        for tool, values in {"": self.policy, **self.tool_policies}.items():
            try:
                values.policy()
            except PolicyError as error:
                name = (
                    f"TOOLSAFE_TOOL_POLICIES[{tool}].{error.knob}"
                    if tool
                    else knob_variable(error.knob)
                )
                raise SettingsError(name, error.problem) from None

    def policy_for(self, tool: str) -> Policy:
        return self.tool_policies.get(tool, self.policy).policy()

    def was_set(self, variable: str) -> bool:
        """Whether ``variable`` had a value when these settings were read."""
        return bool(self.environ.get(variable, "").strip())

    def time_limits(self) -> dict[str, tuple[float, float]]:
        """(soft, hard) time limit of each kind of task, in seconds: ``call`` (execute and
        verify), ``notify`` (escalate) and ``sweep``."""
        notify = self.escalation_webhook_timeout * 2 + 5
        sweep = max(self.sweep_interval * 4, 30.0)
        return {
            "call": (self.task_soft_time_limit, self.task_time_limit),
            "notify": (notify, notify + 5),
            "sweep": (sweep, sweep + 5),
        }

    def adapter_settings(self) -> dict[str, BaseModel]:
        """The settings each adapter module declares (``ADAPTER_SETTINGS``), read from
        ``TOOLSAFE_<PREFIX>_<FIELD>``, by module name; imports the modules."""
        taken = set(_core_variables())
        found: dict[str, BaseModel] = {}
        for name in self.adapter_modules:
            spec = _declared(name)
            if spec is not None:
                found[name] = read_model(name, spec.prefix, spec.model, self.environ, taken)
        return found

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Build the settings from ``TOOLSAFE_*`` variables; a bad value names its variable.

        Parses only: the adapter modules and escalation handlers are imported by
        :func:`load_settings`, or when a process first needs them."""
        return _read(Reader(os.environ if environ is None else environ))


def _read(reader: Reader) -> Settings:
    # Every variable is read on every call (none behind a condition): known_variables()
    # lists the settings by recording what this function asks for.
    defaults = PolicySettings()
    base = PolicySettings.from_knobs({k: reader.knob(k, getattr(defaults, k)) for k in KNOBS})
    fault_plan = reader.path("TOOLSAFE_FAULT_PLAN")
    state_dir = reader.path("TOOLSAFE_FAULT_STATE_DIR")
    if fault_plan and not state_dir:
        state_dir = fault_plan + ".fired"
    # Unset, the heartbeat beats five times a lease, whatever lease was chosen.
    lease = reader.number("TOOLSAFE_LEASE_SECONDS", 15.0)
    return Settings(
        broker_url=reader.broker_url("TOOLSAFE_BROKER_URL", DEFAULT_BROKER_URL),
        result_backend=reader.service_url("TOOLSAFE_RESULT_BACKEND", "redis://127.0.0.1:6379/1"),
        database_url=reader.database_url("TOOLSAFE_DATABASE_URL", DEFAULT_DATABASE_URL),
        adapter_modules=reader.modules("TOOLSAFE_ADAPTERS", DEFAULT_ADAPTERS),
        lease=lease,
        heartbeat_interval=reader.number("TOOLSAFE_HEARTBEAT_INTERVAL", lease / 5),
        task_time_limit=reader.number("TOOLSAFE_TASK_TIME_LIMIT", 60.0),
        task_soft_time_limit=reader.number("TOOLSAFE_TASK_SOFT_TIME_LIMIT", 50.0),
        sweep_interval=reader.number("TOOLSAFE_SWEEP_INTERVAL", 5.0),
        sweep_batch=reader.integer("TOOLSAFE_SWEEP_BATCH", 500),
        republish_after=reader.number("TOOLSAFE_REPUBLISH_AFTER", 30.0),
        max_eta=reader.number("TOOLSAFE_MAX_ETA", 10.0),
        eta_jitter=reader.number("TOOLSAFE_ETA_JITTER", 0.1),
        submit_window=reader.number("TOOLSAFE_SUBMIT_WINDOW", 0.001),
        visibility_timeout=reader.number("TOOLSAFE_VISIBILITY_TIMEOUT", 3600.0),
        worker_eta_task_limit=reader.integer("TOOLSAFE_WORKER_ETA_TASK_LIMIT", 1000),
        policy=base,
        tool_policies={
            tool: PolicySettings.from_knobs({**base.knobs(), **overrides})
            for tool, overrides in reader.tool_policies("TOOLSAFE_TOOL_POLICIES").items()
        },
        escalation_webhook_url=reader.url("TOOLSAFE_ESCALATION_WEBHOOK_URL"),
        escalation_webhook_timeout=reader.number("TOOLSAFE_ESCALATION_WEBHOOK_TIMEOUT", 5.0),
        escalation_handlers=reader.handlers("TOOLSAFE_ESCALATION_HANDLERS"),
        escalation_resend_after=reader.number("TOOLSAFE_ESCALATION_RESEND_AFTER", 60.0),
        faults_enabled=reader.flag("TOOLSAFE_FAULTS_ENABLED"),
        fault_plan=fault_plan,
        fault_state_dir=state_dir,
        log_json=reader.choice("TOOLSAFE_LOG_FORMAT", ("text", "json"), "text") == "json",
        metrics_port=reader.port("TOOLSAFE_METRICS_PORT"),
        metrics_address=reader.host("TOOLSAFE_METRICS_ADDRESS", DEFAULT_METRICS_ADDRESS),
        metrics_poll_interval=reader.number("TOOLSAFE_METRICS_POLL_INTERVAL", 1.0),
        metrics_gap_timeout=reader.number("TOOLSAFE_METRICS_GAP_SECONDS", 60.0),
        operator=reader.name("TOOLSAFE_OPERATOR"),
        max_input_bytes=reader.integer("TOOLSAFE_MAX_INPUT_BYTES", 262_144),
        secret_keys=reader.secret_keys("TOOLSAFE_SECRET_KEYS"),
        gateway_max_body=reader.integer("TOOLSAFE_GATEWAY_MAX_BODY_BYTES", 1_048_576),
        gateway_max_header=reader.integer("TOOLSAFE_GATEWAY_MAX_HEADER_BYTES", 16_384),
        gateway_max_wait=reader.number("TOOLSAFE_GATEWAY_MAX_WAIT", 60.0),
        gateway_max_waits=reader.integer("TOOLSAFE_GATEWAY_MAX_WAITS", 1000),
        gateway_auth_failures=reader.integer("TOOLSAFE_GATEWAY_AUTH_FAILURES", 10),
        gateway_auth_window=reader.number("TOOLSAFE_GATEWAY_AUTH_WINDOW", 60.0),
        gateway_auth_verifiers=reader.integer("TOOLSAFE_GATEWAY_AUTH_VERIFIERS", 2),
        mcp_wait=reader.number("TOOLSAFE_MCP_WAIT", 20.0),
        ui_session_key=reader.text("TOOLSAFE_UI_SESSION_KEY"),
        notify_poll_interval=reader.number("TOOLSAFE_NOTIFY_POLL_INTERVAL", 0.05),
        environ=reader.toolsafe_variables(),
    )


# ----------------------------------------------------------------------------- rules


def knob_variable(knob: str) -> str:
    """The variable of a policy knob: ``max_attempts`` → ``TOOLSAFE_MAX_ATTEMPTS``."""
    return PREFIX + knob.upper()


def required_visibility_timeout(settings: Settings) -> float:
    """The smallest visibility timeout :data:`VISIBILITY_RULE` allows: twice the longest
    ETA (with its jitter) plus the longest hard time limit of any task."""
    longest_limit = max(hard for _, hard in settings.time_limits().values())
    return 2 * (settings.max_eta + settings.eta_jitter + longest_limit)


def check_visibility(settings: Settings) -> None:
    """The broker must not redeliver a message that a worker holds on purpose."""
    needed = required_visibility_timeout(settings)
    if settings.visibility_timeout < needed:
        raise SettingsError(
            "TOOLSAFE_VISIBILITY_TIMEOUT",
            f"must be at least 2 x (TOOLSAFE_MAX_ETA + TOOLSAFE_ETA_JITTER + the longest "
            f"hard time limit of any task) = {needed:g}s, got {settings.visibility_timeout:g}s;"
            " otherwise the broker redelivers held ETA and running messages",
        )


# ----------------------------------------------------------------------------- at start


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """What every process does at start: read the settings, import the adapter modules,
    read their settings and register them once on a trial registry, and resolve the
    escalation handlers; the first bad value
    raises :class:`SettingsError` naming its variable and the form it needs."""
    settings = Settings.from_env(environ)
    try:
        # A trial registration: two modules with the same tool, or a register() that
        # refuses its settings, stop the process here rather than in a Celery signal.
        Registry().load_modules(settings.adapter_modules, settings.adapter_settings())
    except ToolsafeError as error:
        if isinstance(error, SettingsError):
            raise
        raise SettingsError(
            "TOOLSAFE_ADAPTERS", f"must name adapter modules that register: {error}"
        ) from error
    for path in settings.escalation_handlers:
        import_object(path, "TOOLSAFE_ESCALATION_HANDLERS")
    return settings


def load_settings_or_exit(environ: Mapping[str, str] | None = None, what: str = "") -> Settings:
    """:func:`load_settings` for a process's entry point (worker, beat, CLI, gateway,
    demo): a bad value prints one line to stderr and exits with code 2 before anything
    else happens. ``what`` names the process in that line (``"the worker"``)."""
    try:
        return load_settings(environ)
    except SettingsError as error:
        lead = f"cannot start {what}" if what else "error"
        sys.stderr.write(f"toolsafe: {lead}: {error}\n")
        sys.stderr.flush()
        raise SystemExit(2) from None


def module_settings(module: str, environ: Mapping[str, str] | None = None) -> BaseModel | None:
    """The settings one adapter module declares, read from ``TOOLSAFE_<PREFIX>_*`` as a
    worker reads them (None when it declares none); a bad value names its variable."""
    spec = _declared(module)
    if spec is None:
        return None
    variables = os.environ if environ is None else environ
    return read_model(module, spec.prefix, spec.model, variables, set(_core_variables()))


def known_variables(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Every ``TOOLSAFE_*`` variable the settings read: toolsafe's own and those of the
    adapter modules ``TOOLSAFE_ADAPTERS`` names in ``environ`` (imports them)."""
    settings = Settings.from_env(environ)
    names = set(_core_variables())
    for module in settings.adapter_modules:
        spec = _declared(module)
        if spec is not None:
            names.update(
                variable_name(spec.prefix, field_name) for field_name in spec.model.model_fields
            )
    return tuple(sorted(names))


def child_environ(settings_env: Mapping[str, str]) -> dict[str, str]:
    """The environment of a subprocess whose settings the caller decides: this process's
    environment without its ``TOOLSAFE_*`` variables, plus ``settings_env``."""
    inherited = {key: value for key, value in os.environ.items() if not key.startswith(PREFIX)}
    return {**inherited, **settings_env}


def _core_variables() -> tuple[str, ...]:
    reader = Reader({})
    _read(reader)
    return tuple(reader.asked)


def _declared(module: str) -> AdapterSettings | None:
    try:
        return declared_settings(import_adapter_module(module), module)
    except AdapterLoadError as error:
        raise SettingsError(
            "TOOLSAFE_ADAPTERS", f"must name importable adapter modules: {error}"
        ) from error


def otel_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The OpenTelemetry SDK's own ``OTEL_*`` variables, read here as every variable is:
    ``toolsafe.tracing`` decides from them whether tracing is on (docs/tracing.md)."""
    variables = os.environ if environ is None else environ
    return {key: value for key, value in variables.items() if key.startswith("OTEL_")}
