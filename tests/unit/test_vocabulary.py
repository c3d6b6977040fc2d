"""One vocabulary: every code the package raises, returns, compares or builds is in a
catalogue, each string means one thing, and every set of states lives in
``toolsafe.recovery.states``. Pure: reads source and catalogues, no I/O beyond that."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final

import pytest

import toolsafe
from tests.support.vocabulary_scan import FAMILY, codes_in, package_sources, state_sets_in
from toolsafe.adapters.codes import CATALOGUE, RUNTIME_ENVELOPE_CODES
from toolsafe.adapters.errors import INPUT_REFUSALS
from toolsafe.adapters.examples.downstream_state import DOWNSTREAM_CODES
from toolsafe.adapters.lookup_codes import LOOKUP_CODES, is_lookup_code, lookup_http
from toolsafe.conformance.hostile import SIMULATED_UPSTREAM_CODES
from toolsafe.gateway.problems import GATEWAY_CODES
from toolsafe.integrations._calls import INTEGRATION_CODES
from toolsafe.recovery import guards
from toolsafe.recovery.reasons import NOOP_REASONS, REASONS, REFUSALS, REFUSED_NOOPS
from toolsafe.recovery.states import CLAIMABLE, StepState
from toolsafe.recovery.store.keys import KEY_REFUSALS

PACKAGE: Final = Path(toolsafe.__file__).resolve().parent

CATALOGUES: Final[Mapping[str, Mapping[str, str]]] = {
    "envelope code": {code: spec.meaning for code, spec in CATALOGUE.items()},
    "lookup code": LOOKUP_CODES,
    "runtime reason": REASONS,
    "refusal": REFUSALS,
    "no-op reason": NOOP_REASONS,
    "input refusal": INPUT_REFUSALS,
    "key refusal": KEY_REFUSALS,
    # The gateway's own problem codes (it answers the runtime's and the client's with
    # theirs, under the same names).
    "gateway problem": GATEWAY_CODES,
    # What an agent-SDK integration answers a tool call it did not take.
    "integration refusal": INTEGRATION_CODES,
}
"""toolsafe's own vocabularies: one meaning per string, across all of them."""

FOREIGN: Final[Mapping[str, Mapping[str, str]]] = {
    # The example downstream stands in for someone else's API; its adapters translate
    # these into envelope codes, so some share a spelling (RATE_LIMITED) on purpose.
    "example downstream code": DOWNSTREAM_CODES,
    # What the conformance kit's proxy serves as a hostile upstream.
    "simulated upstream code": SIMULATED_UPSTREAM_CODES,
}

NOT_CODES: Final[Mapping[str, str]] = {
    "INFO": "a log level",
    "WARNING": "a log level",
    "POST": "an HTTP method",
    "BEGIN": "SQL",
    "MATERIALIZED": "SQL",
    "CASCADE": "SQL",
    "AUTOCOMMIT": "SQLAlchemy's isolation level for a DBAPI connection in autocommit",
    "NFKC": "a Unicode normal form",
    "SIGKILL": "a signal's name in the chaos report",
    "PYTHONUNBUFFERED": "Python's own environment variable",
    "PYTHON": "the prefix of Python's own environment variables (harness/preload.py)",
    "FAKETIME": "libfaketime's environment variable (harness/preload.py)",
    "COVERAGE": "the prefix of coverage.py's environment variables (harness/preload.py)",
    "MALLOC": "the prefix of glibc's malloc environment variables (harness/preload.py)",
    "LANG": "the locale's environment variable (harness/preload.py)",
    "DEFAULT_TIMEOUT": "a constant's name, re-exported lazily by toolsafe/conformance",
    "OTEL_SDK_DISABLED": "an OpenTelemetry SDK environment variable (docs/tracing.md)",
    "OTEL_TRACES_EXPORTER": "an OpenTelemetry SDK environment variable (docs/tracing.md)",
    "OTEL_EXPORTER_OTLP_PROTOCOL": "an OpenTelemetry SDK environment variable",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "an OpenTelemetry SDK environment variable",
    "OTEL_SERVICE_NAME": "an OpenTelemetry SDK environment variable",
    "OTEL_RESOURCE_ATTRIBUTES": "an OpenTelemetry SDK environment variable",
    "FAIL": "a word of the demo's printed report",
    "REPORT": "a heading of the demo's printed report",
    "SC_CLK_TCK": "a name os.sysconf knows (clock ticks per second)",
    "FILE": "an argument's metavar in --help",
    "NAME": "an argument's metavar in --help",
    "PATCH": "an HTTP method",
    "DELETE": "an HTTP method",
    "DENY": "an X-Frame-Options value (the status page)",
    "TOOL": "an argument's metavar in --help",
    "JSON": "an argument's metavar in --help",
    "OPERATION_REF": "an argument's metavar in --help",
    "REFERENCE": "an argument's metavar in --help",
    "GROUP": "an argument's metavar in --help",
    "PREFIX": "an argument's metavar in --help",
    "DURATION": "an argument's metavar in --help",
    "SECONDS": "an argument's metavar in --help",
    "PASSED": "a word of the conformance report",
    "FAILED": "a word of the conformance report",
    "ADAPTER_SETTINGS": "the attribute an adapter module declares its settings in",
    "EXAMPLE": "the example adapters' settings prefix (TOOLSAFE_EXAMPLE_*)",
}
"""Upper-case strings of the package that are no code, and what they are."""

SKIPPED: Final[Mapping[str, str]] = {
    "settings.py": "the settings room: its upper-case strings name environment variables",
    "recovery/migrations": "a migration is the schema as of its revision, frozen",
}
"""Parts of the package the scan leaves out, and why."""

STATE_SETS_HOME: Final = "recovery/states.py"


def _families(vocabulary: Mapping[str, str]) -> set[str]:
    """``HEAD_<…>`` for every family entry (``LOOKUP_HTTP_<status>``)."""
    return {code.split("<", 1)[0] + FAMILY for code in vocabulary if "<" in code}


def _known() -> set[str]:
    known: set[str] = set(NOT_CODES)
    for vocabulary in (*CATALOGUES.values(), *FOREIGN.values()):
        known |= set(vocabulary) | _families(vocabulary)
    return known


def uncatalogued(source: str, path: str = "<source>") -> list[str]:
    """The codes of ``source`` that no catalogue holds (environment variables aside)."""
    known = _known()
    return [
        str(found)
        for found in codes_in(source, path)
        if found.text not in known and not found.text.startswith("TOOLSAFE_")
    ]


# ------------------------------------------------------------------ the scanner can fail

PLANTED: Final = '''
"""A module that writes a code no catalogue holds. SOME_DOCSTRING_WORD is fine."""
__all__ = ["EXPORTED_NAME"]

def refuse(step):
    if step.reason == "PLANTED_COMPARISON":
        raise TransitionRefused("PLANTED_REFUSAL", "no")
    return LookupUnavailable(checked_at=now, code=f"LOOKUP_PLANTED_{step.status}")

def fine(status):
    known = "ATTEMPTS_EXHAUSTED"
    return f"LOOKUP_HTTP_{status}", known, "TOOLSAFE_BROKER_URL", "not a code"

def also_built(n):
    return "PLANTED_HEAD_" + str(n)
'''


def test_the_scan_catches_a_planted_code() -> None:
    assert uncatalogued(PLANTED, "planted.py") == [
        "planted.py:6: PLANTED_COMPARISON",
        "planted.py:7: PLANTED_REFUSAL",
        "planted.py:8: LOOKUP_PLANTED_<…>",
        "planted.py:15: PLANTED_HEAD_<…>",
    ]


def test_the_scan_finds_codes_in_every_position() -> None:
    source = (
        'X = "CODE_A"\nf("CODE_B", code="CODE_C")\nif y != "CODE_D": pass\nreturn_ = {"CODE_E": 1}'
    )
    assert [found.text for found in codes_in(source)] == [f"CODE_{c}" for c in "ABCDE"]


def test_the_scan_catches_a_state_set_spelled_out() -> None:
    source = (
        "WAITING = frozenset({S.NEEDS_INPUT, S.AWAITING_APPROVAL})\n"
        "if state in (StepState.PENDING.value, StepState.WAITING_RETRY.value): pass\n"
        'CLAIMABLE = ("pending", "waiting_retry")\n'
        "label = LABELS[(S.PENDING, S.IN_FLIGHT)]\n"
        "one = frozenset({S.PENDING})\n"
    )
    assert [found.line for found in state_sets_in(source)] == [1, 2, 3]


# ------------------------------------------------------------------ the package


def test_every_code_in_the_package_is_in_a_catalogue() -> None:
    found = [
        problem
        for path, source in package_sources(PACKAGE, SKIPPED)
        for problem in uncatalogued(source, path)
    ]
    assert found == [], "codes that no catalogue holds (add them to one):\n" + "\n".join(found)


def test_the_scan_reads_the_linked_rooms() -> None:
    paths = {path for path, _ in package_sources(PACKAGE, SKIPPED)}
    for module in ("adapters/guard.py", "recovery/decide.py", "tasks/client.py", "cli/main.py"):
        assert module in paths
    assert not any(path.startswith("recovery/migrations/") for path in paths)


def test_every_state_set_lives_in_the_states_module() -> None:
    found = [
        str(problem)
        for path, source in package_sources(PACKAGE, SKIPPED)
        if path != STATE_SETS_HOME
        for problem in state_sets_in(source, path)
    ]
    assert found == [], f"state sets outside {STATE_SETS_HOME}:\n" + "\n".join(found)


# ------------------------------------------------------------------ the catalogues


def test_each_string_means_one_thing() -> None:
    seen: dict[str, str] = {}
    for name, vocabulary in CATALOGUES.items():
        for code in vocabulary:
            # An escalated step's envelope carries its reason as its code, by design.
            shown_reason = code in RUNTIME_ENVELOPE_CODES and {seen.get(code), name} == {
                "envelope code",
                "runtime reason",
            }
            assert code not in seen or shown_reason, f"{code} is both a {seen[code]} and a {name}"
            seen[code] = name


@pytest.mark.parametrize("name", [*CATALOGUES, *FOREIGN])
def test_every_entry_carries_a_one_line_meaning(name: str) -> None:
    vocabulary = {**CATALOGUES, **FOREIGN}[name]
    assert vocabulary
    for code, meaning in vocabulary.items():
        assert meaning.strip() and "\n" not in meaning, code


def test_no_op_reasons_the_counts_and_the_guards_use_are_catalogued() -> None:
    assert set(REFUSED_NOOPS) <= set(NOOP_REASONS)
    for guard in (guards.EXECUTION, guards.VERIFICATION):
        assert {rule.reason for rule in guard.rules} <= set(NOOP_REASONS)


def test_lookup_code_families_are_built_by_their_function() -> None:
    assert lookup_http(503) == "LOOKUP_HTTP_503" and is_lookup_code(lookup_http(503))
    assert all(is_lookup_code(code) for code in LOOKUP_CODES if "<" not in code)
    assert not is_lookup_code("LOOKUP_HTTP_") and not is_lookup_code("LOOKUP_HTTP_5x")
    assert not is_lookup_code("LOOKUP_UNAVAILABLE")  # a runtime reason, not a lookup code


def test_the_execution_guard_claims_from_the_claimable_states() -> None:
    assert guards.EXECUTION.states == CLAIMABLE
    assert guards.VERIFICATION.states == frozenset({StepState.VERIFYING})
