"""The kit's entry points: load an adapter, aim it at a target the caller named, run every
scenario against it (``toolsafe.conformance`` re-exports them)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from toolsafe.adapters.function import FunctionAdapter
from toolsafe.adapters.http import HttpAdapter
from toolsafe.adapters.protocol import Adapter
from toolsafe.conformance.doubles import HttpDouble, function_double
from toolsafe.conformance.function_target import CallTarget
from toolsafe.conformance.loading import Aim, Loaded, aim
from toolsafe.conformance.report import Report
from toolsafe.conformance.scenarios import SampleInputError, run_scenarios
from toolsafe.conformance.targets import HttpTarget, Target

DEFAULT_TIMEOUT = 1.0


def read_sample(path: str | Path) -> dict[str, Any]:
    """The sample input: a JSON object in a file; a bad file is named in the error."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise SampleInputError(
            f"cannot read the sample input {str(path)!r}: {error.strerror}"
        ) from None
    except ValueError as error:
        raise SampleInputError(f"the sample input {str(path)!r} is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise SampleInputError(f"the sample input {str(path)!r} must be a JSON object")
    return data


def check_adapter(
    adapter: Adapter[Any] | Loaded,
    sample: Mapping[str, Any],
    *,
    base_url: str | None = None,
    target_from_settings: bool = False,
    dry_run: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    run_id: str | None = None,
    announce: Callable[[str], None] | None = None,
) -> Report:
    """Run every scenario against ``adapter`` (an adapter, or what :func:`load_adapter`
    built from its settings). A write runs only against a target the caller names:
    ``base_url``, ``target_from_settings`` (where its settings point), or ``dry_run`` (an
    in-process double); otherwise :class:`TargetNotNamed` is raised before anything is
    sent. ``announce`` is told the target first. ``timeout`` is the adapter's timeout for
    every normal answer; the slow-answer scenarios give it a shorter one
    (``targets.SLOW_ANSWER_TIMEOUT``) and hold the answer only until it gives up."""
    loaded = adapter if isinstance(adapter, Loaded) else Loaded(adapter)
    loaded.adapter.refuse_unknowable()
    chosen = aim(loaded, base_url, target_from_settings, dry_run)
    if announce is not None:
        announce(chosen.line)
    with ExitStack() as stack:
        target = _target(loaded, chosen, timeout, stack)
        stack.callback(target.close)
        report = run_scenarios(target, sample, run_id)
    report.target = chosen.line
    return report


def _target(loaded: Loaded, chosen: Aim, timeout: float, stack: ExitStack) -> Target:
    adapter = loaded.adapter
    if isinstance(adapter, HttpAdapter):
        upstream = chosen.upstream or adapter.settings.base_url
        if chosen.mode == "dry":
            upstream = stack.enter_context(HttpDouble(adapter)).url
        return HttpTarget(adapter, upstream, timeout)
    if isinstance(adapter, FunctionAdapter):
        if chosen.mode == "dry":
            return CallTarget(function_double(adapter), timeout)
        if chosen.upstream is not None and loaded.rebuild(chosen.upstream) is not None:
            return CallTarget(adapter, timeout, chosen.upstream, _rebuilder(loaded))
        return CallTarget(adapter, timeout)
    if chosen.mode == "dry":
        raise ValueError(
            f"--dry-run: {adapter.tool!r} is neither an HTTP toolkit adapter nor a @tool "
            "function, so the kit has no double to put behind it"
        )
    return Target(adapter)


def _rebuilder(loaded: Loaded) -> Callable[[str], FunctionAdapter]:
    def rebuild(url: str) -> FunctionAdapter:
        built = loaded.rebuild(url)
        assert built is not None  # checked by the caller
        return built

    return rebuild


__all__ = ["DEFAULT_TIMEOUT", "check_adapter", "read_sample"]
