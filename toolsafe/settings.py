"""Settings of a toolsafe deployment, read once from ``TOOLSAFE_*`` environment variables.

The one module of the package that reads the environment. Nothing here is read at import
time: ``Settings.from_env()`` builds a frozen value of sections (settings_sections.py:
``settings.broker``, ``settings.calls``…) that the Celery app, the client and the CLI are
given, so a test can build a second one; ``load_settings()`` also imports the
adapter modules and reads their own settings (``TOOLSAFE_<PREFIX>_<FIELD>``), which is
what every process does at start (``load_settings_or_exit()``: one line, exit code 2).
"""

from __future__ import annotations

import dataclasses
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
from toolsafe.recovery.policy import KNOBS
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
from toolsafe.settings_sections import (
    DEFAULT_ADAPTERS,
    DEFAULT_DATABASE_URL,
    EARLY_WAIT_SHARE,
    SUBMIT_HINTS,
    BrokerSettings,
    CallSettings,
    EscalationSettings,
    FaultSettings,
    GatewaySettings,
    MetricsSettings,
    Policies,
    PolicySettings,
    Section,
    StoreSettings,
    SweepSettings,
    ToolSettings,
)

__all__ = [
    "DEFAULT_ADAPTERS",
    "DEFAULT_BROKER_URL",
    "DEFAULT_DATABASE_URL",
    "EARLY_WAIT_SHARE",
    "POLICY_KEYS",
    "VISIBILITY_RULE",
    "BrokerSettings",
    "CallSettings",
    "EscalationSettings",
    "FaultSettings",
    "GatewaySettings",
    "MetricsSettings",
    "Policies",
    "PolicySettings",
    "Section",
    "Settings",
    "SettingsError",
    "StoreSettings",
    "SweepSettings",
    "ToolSettings",
    "check_visibility",
    "child_environ",
    "filesystem_folder",
    "import_object",
    "known_variables",
    "load_settings",
    "load_settings_or_exit",
    "required_visibility_timeout",
]

# Keys accepted in TOOLSAFE_TOOL_POLICIES; each is also TOOLSAFE_<KEY>, the default.
POLICY_KEYS: Final = KNOBS

# The rule between the broker's visibility timeout and what a worker holds on purpose
# (docs/operations.md quotes it; required_visibility_timeout computes it).
VISIBILITY_RULE: Final = (
    "TOOLSAFE_VISIBILITY_TIMEOUT ≥ 2 × (TOOLSAFE_MAX_ETA + TOOLSAFE_ETA_JITTER"
    " + max(TOOLSAFE_TASK_TIME_LIMIT, 2 × TOOLSAFE_ESCALATION_WEBHOOK_TIMEOUT + 10,"
    " max(4 × TOOLSAFE_SWEEP_INTERVAL, 30) + 5))"
)


@dataclass(frozen=True)
class Settings:
    """Everything a worker, beat, the client and the CLI need, in one section per part
    of toolsafe (``settings.broker.max_eta``, ``settings.calls.lease``…); times in
    seconds. Each section checks its own values; this checks the rules across them.

    Tests build one from the defaults with :meth:`replace`:
    ``Settings().replace(broker={"max_eta": 0.4}, sweep={"batch": 2})``."""

    broker: BrokerSettings = field(default_factory=BrokerSettings)
    store: StoreSettings = field(default_factory=StoreSettings)
    tools: ToolSettings = field(default_factory=ToolSettings)
    calls: CallSettings = field(default_factory=CallSettings)
    sweep: SweepSettings = field(default_factory=SweepSettings)
    policies: Policies = field(default_factory=Policies)
    escalation: EscalationSettings = field(default_factory=EscalationSettings)
    faults: FaultSettings = field(default_factory=FaultSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    gateway: GatewaySettings = field(default_factory=GatewaySettings)
    # The name the CLI records for approvals and resolutions (None: the OS user).
    operator: str | None = None
    log_json: bool = False
    # The TOOLSAFE_* variables this value was read from: the adapter modules' own
    # settings are read from here, never from the process's environment again.
    environ: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Refuse combinations across sections that break the durability rules (DESIGN
        §4, §8); each section has checked its own values when it was built."""
        check_visibility(self)

    def replace(self, **sections: Mapping[str, object]) -> Settings:
        """These settings with some fields of some sections changed, checked again:
        ``settings.replace(store={"url": url}, calls={"lease": 4, "heartbeat_interval": 1})``.
        An unknown section or field raises :class:`TypeError`."""
        changed: dict[str, Section] = {}
        for name, values in sections.items():
            section = getattr(self, name, None)
            if not isinstance(section, Section):
                raise TypeError(f"Settings has no section {name!r}; it has {_SECTIONS}")
            changed[name] = dataclasses.replace(section, **values)
        # Each value is the replaced copy of the section under its own name, so its type
        # is that field's; mypy cannot follow a name known only at run time.
        return dataclasses.replace(self, **changed)  # type: ignore[arg-type]

    def sections(self) -> dict[str, Section]:
        """Each section by its name, in the order of the fields."""
        return {name: getattr(self, name) for name in _SECTIONS}

    def was_set(self, variable: str) -> bool:
        """Whether ``variable`` had a value when these settings were read."""
        return bool(self.environ.get(variable, "").strip())

    def time_limits(self) -> dict[str, tuple[float, float]]:
        """(soft, hard) time limit of each kind of task, in seconds: ``call`` (execute and
        verify), ``notify`` (escalate) and ``sweep``."""
        notify = self.escalation.webhook_timeout * 2 + 5
        sweep = max(self.sweep.interval * 4, 30.0)
        return {
            "call": (self.calls.soft_time_limit, self.calls.time_limit),
            "notify": (notify, notify + 5),
            "sweep": (sweep, sweep + 5),
        }

    def adapter_settings(self) -> dict[str, BaseModel]:
        """The settings each adapter module declares (``ADAPTER_SETTINGS``), read from
        ``TOOLSAFE_<PREFIX>_<FIELD>``, by module name; imports the modules."""
        taken = set(_core_variables())
        found: dict[str, BaseModel] = {}
        for name in self.tools.adapter_modules:
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


_SECTIONS: Final = tuple(
    f.name for f in fields(Settings) if f.name not in {"operator", "log_json", "environ"}
)


def _read(reader: Reader) -> Settings:
    # Every variable is read on every call (none behind a condition): known_variables()
    # lists the settings by recording what this function asks for. The defaults are the
    # sections' own.
    broker, store, tools, calls = BrokerSettings(), StoreSettings(), ToolSettings(), CallSettings()
    sweep, escalation, metrics = SweepSettings(), EscalationSettings(), MetricsSettings()
    gateway = GatewaySettings()
    defaults = PolicySettings()
    base = PolicySettings.from_knobs({k: reader.knob(k, getattr(defaults, k)) for k in KNOBS})
    fault_plan = reader.path("TOOLSAFE_FAULT_PLAN")
    state_dir = reader.path("TOOLSAFE_FAULT_STATE_DIR")
    if fault_plan and not state_dir:
        state_dir = fault_plan + ".fired"
    # Unset, the heartbeat beats five times a lease, whatever lease was chosen.
    lease = reader.number("TOOLSAFE_LEASE_SECONDS", calls.lease)
    return Settings(
        broker=BrokerSettings(
            url=reader.broker_url("TOOLSAFE_BROKER_URL", broker.url),
            result_backend=reader.service_url(
                "TOOLSAFE_RESULT_BACKEND", "redis://127.0.0.1:6379/1"
            ),
            visibility_timeout=reader.number(
                "TOOLSAFE_VISIBILITY_TIMEOUT", broker.visibility_timeout
            ),
            max_eta=reader.number("TOOLSAFE_MAX_ETA", broker.max_eta),
            eta_jitter=reader.number("TOOLSAFE_ETA_JITTER", broker.eta_jitter),
            worker_eta_task_limit=reader.integer(
                "TOOLSAFE_WORKER_ETA_TASK_LIMIT", broker.worker_eta_task_limit
            ),
        ),
        store=StoreSettings(
            url=reader.database_url("TOOLSAFE_DATABASE_URL", store.url),
            submit_window=reader.number("TOOLSAFE_SUBMIT_WINDOW", store.submit_window),
            submit_hints=reader.choice("TOOLSAFE_SUBMIT_HINTS", SUBMIT_HINTS, store.submit_hints),
            notify_poll_interval=reader.number(
                "TOOLSAFE_NOTIFY_POLL_INTERVAL", store.notify_poll_interval
            ),
        ),
        tools=ToolSettings(
            adapter_modules=reader.modules("TOOLSAFE_ADAPTERS", DEFAULT_ADAPTERS),
            max_input_bytes=reader.integer("TOOLSAFE_MAX_INPUT_BYTES", tools.max_input_bytes),
            secret_keys=reader.secret_keys("TOOLSAFE_SECRET_KEYS"),
        ),
        calls=CallSettings(
            lease=lease,
            heartbeat_interval=reader.number("TOOLSAFE_HEARTBEAT_INTERVAL", lease / 5),
            time_limit=reader.number("TOOLSAFE_TASK_TIME_LIMIT", calls.time_limit),
            soft_time_limit=reader.number("TOOLSAFE_TASK_SOFT_TIME_LIMIT", calls.soft_time_limit),
            early_wait=reader.number("TOOLSAFE_EARLY_WAIT", calls.early_wait),
        ),
        sweep=SweepSettings(
            interval=reader.number("TOOLSAFE_SWEEP_INTERVAL", sweep.interval),
            batch=reader.integer("TOOLSAFE_SWEEP_BATCH", sweep.batch),
            republish_after=reader.number("TOOLSAFE_REPUBLISH_AFTER", sweep.republish_after),
        ),
        policies=Policies(
            default=base,
            per_tool={
                tool: PolicySettings.from_knobs({**base.knobs(), **overrides})
                for tool, overrides in reader.tool_policies("TOOLSAFE_TOOL_POLICIES").items()
            },
        ),
        escalation=EscalationSettings(
            webhook_url=reader.url("TOOLSAFE_ESCALATION_WEBHOOK_URL"),
            webhook_timeout=reader.number(
                "TOOLSAFE_ESCALATION_WEBHOOK_TIMEOUT", escalation.webhook_timeout
            ),
            handlers=reader.handlers("TOOLSAFE_ESCALATION_HANDLERS"),
            resend_after=reader.number("TOOLSAFE_ESCALATION_RESEND_AFTER", escalation.resend_after),
        ),
        faults=FaultSettings(
            enabled=reader.flag("TOOLSAFE_FAULTS_ENABLED"), plan=fault_plan, state_dir=state_dir
        ),
        metrics=MetricsSettings(
            port=reader.port("TOOLSAFE_METRICS_PORT"),
            address=reader.host("TOOLSAFE_METRICS_ADDRESS", metrics.address),
            poll_interval=reader.number("TOOLSAFE_METRICS_POLL_INTERVAL", metrics.poll_interval),
            gap_timeout=reader.number("TOOLSAFE_METRICS_GAP_SECONDS", metrics.gap_timeout),
        ),
        gateway=GatewaySettings(
            max_body=reader.integer("TOOLSAFE_GATEWAY_MAX_BODY_BYTES", gateway.max_body),
            max_header=reader.integer("TOOLSAFE_GATEWAY_MAX_HEADER_BYTES", gateway.max_header),
            max_wait=reader.number("TOOLSAFE_GATEWAY_MAX_WAIT", gateway.max_wait),
            max_waits=reader.integer("TOOLSAFE_GATEWAY_MAX_WAITS", gateway.max_waits),
            auth_failures=reader.integer("TOOLSAFE_GATEWAY_AUTH_FAILURES", gateway.auth_failures),
            auth_window=reader.number("TOOLSAFE_GATEWAY_AUTH_WINDOW", gateway.auth_window),
            auth_verifiers=reader.integer(
                "TOOLSAFE_GATEWAY_AUTH_VERIFIERS", gateway.auth_verifiers
            ),
            mcp_wait=reader.number("TOOLSAFE_MCP_WAIT", gateway.mcp_wait),
            ui_session_key=reader.text("TOOLSAFE_UI_SESSION_KEY"),
        ),
        operator=reader.name("TOOLSAFE_OPERATOR"),
        log_json=reader.choice("TOOLSAFE_LOG_FORMAT", ("text", "json"), "text") == "json",
        environ=reader.toolsafe_variables(),
    )


# ----------------------------------------------------------------------------- rules


def required_visibility_timeout(settings: Settings) -> float:
    """The smallest visibility timeout :data:`VISIBILITY_RULE` allows: twice the longest
    ETA (with its jitter) plus the longest hard time limit of any task."""
    longest_limit = max(hard for _, hard in settings.time_limits().values())
    return 2 * (settings.broker.max_eta + settings.broker.eta_jitter + longest_limit)


def check_visibility(settings: Settings) -> None:
    """The broker must not redeliver a message that a worker holds on purpose."""
    needed = required_visibility_timeout(settings)
    if settings.broker.visibility_timeout < needed:
        raise SettingsError(
            "TOOLSAFE_VISIBILITY_TIMEOUT",
            f"must be at least 2 x (TOOLSAFE_MAX_ETA + TOOLSAFE_ETA_JITTER + the longest "
            f"hard time limit of any task) = {needed:g}s, "
            f"got {settings.broker.visibility_timeout:g}s;"
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
        Registry().load_modules(settings.tools.adapter_modules, settings.adapter_settings())
    except ToolsafeError as error:
        if isinstance(error, SettingsError):
            raise
        raise SettingsError(
            "TOOLSAFE_ADAPTERS", f"must name adapter modules that register: {error}"
        ) from error
    for path in settings.escalation.handlers:
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
    for module in settings.tools.adapter_modules:
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


def adopt_environ(env: Mapping[str, str]) -> None:
    """Make ``env`` this process's whole environment: a child forked from a preloaded
    interpreter (``harness.preload``) taking the one its starter gave it."""
    os.environ.clear()
    os.environ.update(env)


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
