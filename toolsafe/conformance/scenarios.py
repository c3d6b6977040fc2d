"""The conformance scenarios and what each expects, run against a :class:`Target`: a
baseline write, every injected fault, lookups found / not found / down, a lookup right
after a write inside the consistency window, and one effect per operation_ref."""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from toolsafe.adapters.envelope import AnySuccess, ToolError, ToolSuccess
from toolsafe.adapters.protocol import LookupFound, LookupNotFound, LookupResult
from toolsafe.adapters.sending import may_follow_send
from toolsafe.conformance import hostile, messages
from toolsafe.conformance.report import Report, Verdict
from toolsafe.conformance.targets import (
    Attempt,
    CannotInject,
    LookupFault,
    Target,
    WriteFault,
    key_missing,
)

SLACK = timedelta(seconds=2)


class SampleInputError(ValueError):
    """The sample input does not pass the adapter's own validation."""


def describe(envelope: AnySuccess | ToolError) -> str:
    if isinstance(envelope, ToolSuccess):
        evidence = envelope.verification.evidence_ref
        return f"success (evidence {evidence})" if evidence else "success (no evidence)"
    return f"{envelope.code} · {envelope.commit_state} · {envelope.next_action}"


def describe_lookup(result: LookupResult) -> str:
    if isinstance(result, LookupFound):
        return f"found (evidence {result.evidence_ref})"
    if isinstance(result, LookupNotFound):
        return "not found"
    return f"unavailable ({result.code})"


def _slug(name: str) -> str:
    kept = "".join(char if char.isalnum() else "-" for char in name.lower())
    return "-".join(part for part in kept.split("-") if part)[:60]


class Run:
    """One run of every scenario against one target, filling a :class:`Report`."""

    def __init__(
        self, target: Target, sample: Mapping[str, Any], run_id: str | None = None
    ) -> None:
        self.target = target
        self.adapter = target.adapter
        self.sample = dict(sample)
        self.run_id = run_id or secrets.token_hex(4)
        self.report = Report(tool=self.adapter.tool, kind=target.kind)
        self.writes = bool(self.adapter.writes)
        self.has_lookup = self.writes and bool(self.adapter.has_lookup)
        self.window: timedelta = getattr(self.adapter, "consistency_window", timedelta(0))
        self.written: list[str] = []
        # Why the operation_ref does not reach the downstream (None: it does, or the kit
        # cannot see the requests); set by the baseline.
        self.key_lost: str | None = None

    def ref(self, name: str) -> str:
        return f"conformance/{self.run_id}/{_slug(name)}"

    # --- the whole run ---------------------------------------------------------------
    def run(self) -> Report:
        problems = self.adapter.validate(self.sample)
        if problems:
            names = ", ".join(sorted({problem.field for problem in problems}))
            raise SampleInputError(
                f"the sample input does not validate for {self.adapter.tool!r}: {names}"
            )
        baseline = self.baseline()
        faults = self.target.write_faults()
        if not faults:
            self.report.add(
                "fault injection", "faults injected into the call", self.target.note, "skip"
            )
        delivered_ref: str | None = None
        for fault in faults:
            ref = self.ref(fault.name)
            attempt = self.write_fault(fault, ref)
            if attempt is not None and fault.kind == "delivered" and attempt.delivered:
                delivered_ref = delivered_ref or ref
        if self.has_lookup:
            self.lookups(baseline)
            self.window_check()
            self.effects(delivered_ref or baseline)
        elif self.writes:
            self.report.add(
                "lookup by operation_ref",
                "a lookup, or unknown outcomes escalate at once",
                "the adapter has no lookup: every unknown outcome escalates to an operator",
                "warn",
            )
        return self.report

    # --- writes ----------------------------------------------------------------------
    def baseline(self) -> str | None:
        ref = self.ref("baseline")
        attempt = self.target.write(self.sample, ref, None)
        expected = "success with evidence" if self.writes else "success"
        envelope = attempt.envelope
        ok = isinstance(envelope, ToolSuccess) and (
            not self.writes or envelope.verification.evidence_ref is not None
        )
        self.report.add(
            "the sample input, no fault", expected, describe(envelope), "pass" if ok else "fail"
        )
        if self.writes:
            self.key_arrives(ref, attempt)
        if isinstance(envelope, ToolSuccess):
            self.free_text(envelope.result)
        if ok:
            self.written.append(ref)
            return ref
        return None

    def key_arrives(self, ref: str, attempt: Attempt) -> None:
        """(c): the operation_ref reached the downstream where the adapter sends it."""
        place = self.target.key_place
        scenario = "the operation_ref reaches the downstream as its idempotency key"
        if place is None or attempt.seen is None:
            self.report.add(scenario, "the key where the adapter declares it",
                            messages.KEY_UNSEEN, "skip")  # fmt: skip
            return
        self.key_lost = key_missing(attempt.seen, place, ref)
        if self.key_lost is None:
            self.report.add(scenario, f"the operation_ref in {place}", f"in {place}", "pass")
            return
        self.report.add(
            scenario, f"the operation_ref in {place}", messages.key_lost(self.key_lost, place),
            "fail",
        )  # fmt: skip

    def free_text(self, result: object) -> None:
        """An adapter without a result_model whose success carries free text is warned."""
        if getattr(self.adapter, "result_model", None) is not None:
            return
        items = result.items() if isinstance(result, dict) else ()
        texts = [
            key
            for key, value in items
            if isinstance(value, str) and (" " in value.strip() or len(value) > 40)
        ]
        if texts:
            self.report.add(
                "a success's free text has a result_model",
                "a result_model that checks the result's shape",
                messages.free_text(texts),
                "warn",
            )

    def write_fault(self, fault: WriteFault, ref: str) -> Attempt | None:
        try:
            attempt = self.target.write(self.sample, ref, fault)
        except CannotInject as reason:
            self.report.add(fault.name, "(fault injected)", str(reason), "skip")
            return None
        envelope = attempt.envelope
        got = describe(envelope)
        if isinstance(envelope, ToolError) and envelope.retry.not_before is not None:
            ahead = (envelope.retry.not_before - attempt.started).total_seconds()
            got += f" · not_before = start + {ahead:.1f} s"
        leaked = hostile.leaks(envelope)
        if leaked:
            got += f"; upstream text in the envelope: {', '.join(leaked)}"
        expected, failed = self.expect(fault, attempt)
        if failed:
            got += messages.fix_for(fault.kind, self.writes)
        self.report.add(fault.name, expected, got, "fail" if failed or leaked else "pass")
        if attempt.delivered:
            self.written.append(ref)
        if (
            self.has_lookup
            and fault.kind in ("delivered", "ambiguous", "declared_after")
            and attempt.delivered is not None
        ):
            self.verify_after(fault, ref, attempt)
        return attempt

    def expect(self, fault: WriteFault, attempt: Attempt) -> tuple[str, bool]:
        envelope = attempt.envelope
        success = isinstance(envelope, ToolSuccess)
        if fault.kind == "not_sent":
            return "not a success (nothing was sent: not_committed is allowed)", success
        if fault.kind in ("delivered", "ambiguous"):
            if not self.writes:
                return "not a success, and not unknown (a read changes nothing)", success or (
                    isinstance(envelope, ToolError) and envelope.commit_state == "unknown"
                )
            return (
                "unknown → verify_operation (escalate without lookup); never not_committed",
                not (isinstance(envelope, ToolError) and envelope.commit_state == "unknown"),
            )
        if fault.kind == "declared_after":
            return self.expect_declared(fault, envelope)
        if fault.kind == "no_evidence":
            if not self.writes:
                return "any answer (a read needs no evidence)", False
            return messages.NO_EVIDENCE, not (
                isinstance(envelope, ToolError) and envelope.commit_state == "unknown"
            )
        if fault.kind == "retry_after":
            return self.expect_wait(fault, attempt)
        if fault.kind == "failure_body":
            return "not a success; nothing of the body in the envelope", success
        return "not a success; none of the upstream text in the envelope", success

    def expect_declared(
        self, fault: WriteFault, envelope: AnySuccess | ToolError
    ) -> tuple[str, bool]:
        """(d): a declared type raised after the call reached the downstream; one that can
        follow a sent request must come back unknown."""
        assert fault.raised is not None
        why = may_follow_send(fault.raised)
        if why is None:
            return messages.declared_unjudged(fault.raised), isinstance(envelope, ToolSuccess)
        unknown = isinstance(envelope, ToolError) and envelope.commit_state == "unknown"
        return messages.declared_after(fault.raised, why), not unknown

    def expect_wait(self, fault: WriteFault, attempt: Attempt) -> tuple[str, bool]:
        assert fault.wait is not None
        clamp = self.target.max_retry_after
        wait = min(fault.wait, clamp)
        expected = (
            f"after_delay, not_before absolute ≈ now + {int(wait.total_seconds())} s "
            f"(later than now, clamped to {int(clamp.total_seconds())} s)"
        )
        envelope = attempt.envelope
        if not isinstance(envelope, ToolError) or envelope.retry.directive != "after_delay":
            return expected, True
        when = envelope.retry.not_before
        if when is None:
            return expected, True
        low = attempt.started + wait - SLACK
        high = attempt.ended + wait + SLACK
        return expected, not (when > attempt.started and low <= when <= high)

    def verify_after(self, fault: WriteFault, ref: str, attempt: Attempt) -> None:
        if attempt.delivered:
            found, waited = self.eventually_found(ref, attempt.started)
            expected = "found (the write reached the service; verification must see it)"
            self.report.add(
                f"verify after: {fault.name}",
                expected,
                describe_lookup(found) + (f" after {waited:.1f} s" if waited > 0.05 else ""),
                "pass" if isinstance(found, LookupFound) else "fail",
            )
        else:
            found = self.target.lookup(ref, None)
            self.report.add(
                f"verify after: {fault.name}",
                "not found (nothing reached the service)",
                describe_lookup(found),
                "pass" if isinstance(found, LookupNotFound) else "fail",
            )

    def eventually_found(self, ref: str, sent_at: datetime) -> tuple[LookupResult, float]:
        """Look up until found or the consistency window (counted from the send) ran out."""
        started = time.monotonic()
        deadline = sent_at + self.window + timedelta(seconds=0.5)
        while True:
            found = self.target.lookup(ref, None)
            if self.key_lost is not None:
                # The lookup cannot find a write made under no key: no use waiting.
                return found, time.monotonic() - started
            if isinstance(found, LookupFound) or datetime.now(UTC) >= deadline:
                return found, time.monotonic() - started
            time.sleep(0.2)

    # --- lookups ---------------------------------------------------------------------
    def lookups(self, baseline: str | None) -> None:
        fresh = self.ref("never-written")
        absent = self.target.lookup(fresh, None)
        self.report.add(
            "lookup of an operation_ref never written",
            "not found",
            describe_lookup(absent),
            "pass" if isinstance(absent, LookupNotFound) else "fail",
        )
        if baseline is None:
            self.report.add(
                "lookups that are down", "unavailable", "no successful write to look up", "skip"
            )
            return
        found = self.target.lookup(baseline, None)
        self.report.add(
            "lookup of the sample write",
            "found, with evidence",
            describe_lookup(found),
            "pass" if isinstance(found, LookupFound) else "fail",
        )
        for fault in self.target.lookup_faults():
            self.lookup_down(fault, baseline)

    def lookup_down(self, fault: LookupFault, ref: str) -> None:
        result = self.target.lookup(ref, fault)
        good = not isinstance(result, LookupFound | LookupNotFound)
        got = describe_lookup(result)
        if isinstance(result, LookupNotFound):
            got += (
                messages.NOT_FOUND_404
                if fault.not_found_shape
                else " (the runtime would take the write as never done and execute it again)"
            )
        verdict: Verdict = "pass" if good else "fail"
        self.report.add(fault.name, "unavailable, never not found", got, verdict)

    def window_check(self) -> None:
        ref = self.ref("lookup-right-after")
        sent_at = datetime.now(UTC)
        attempt = self.target.write(self.sample, ref, None)
        window = self.window.total_seconds()
        scenario = "lookup right after a write"
        expected = f"found, or not found only inside consistency_window ({window:g} s)"
        if not isinstance(attempt.envelope, ToolSuccess):
            self.report.add(
                scenario, expected, f"the write failed: {describe(attempt.envelope)}", "fail"
            )
            return
        self.written.append(ref)
        first = self.target.lookup(ref, None)
        if isinstance(first, LookupFound):
            self.report.add(scenario, expected, "found at once", "pass")
            return
        if not isinstance(first, LookupNotFound):
            self.report.add(scenario, expected, describe_lookup(first), "fail")
            return
        if window <= 0:
            self.report.add(
                scenario,
                expected,
                "not found right after a successful write while consistency_window is 0: "
                "the runtime would take the write as never done",
                "fail",
            )
            return
        found, waited = self.eventually_found(ref, sent_at)
        if isinstance(found, LookupFound):
            got = f"not found at once, found after {waited:.1f} s (inside the window)"
            self.report.add(scenario, expected, got, "pass")
        else:
            got = (
                f"still {describe_lookup(found)} {waited:.1f} s after the write, past "
                f"consistency_window: the runtime would execute it again (window too short?)"
            )
            self.report.add(scenario, expected, got, "fail")

    # --- effects ---------------------------------------------------------------------
    def effects(self, ref: str | None) -> None:
        """(e), (f): a retry under the same operation_ref is one effect; two, with the
        key delivered where the adapter sends it, is a downstream that ignores it."""
        scenario = "retry under the same operation_ref after a delivered write"
        expected = "one effect per operation_ref (counted through the adapter's lookup)"
        if ref is None:
            self.report.add(scenario, "one effect", "no delivered write to retry", "skip")
            return
        again = self.target.write(self.sample, ref, None)
        if self.key_lost is not None:
            self.report.add(scenario, expected, messages.uncounted(self.key_lost), "fail")
            return
        count = self.target.count(ref)
        if count is None:
            self.report.add(scenario, expected, f"{describe(again.envelope)}; "
                            + messages.CANNOT_COUNT, "skip")  # fmt: skip
            return
        got = f"{describe(again.envelope)}; {count} effect(s)"
        place = self.target.key_place
        ignored = (
            count > 1
            and place is not None
            and again.seen is not None
            and key_missing(again.seen, place, ref) is None
        )
        if ignored and getattr(self.adapter, "deduplicates_by_key", False):
            # A promise the downstream breaks: the runtime relies on it to resend early.
            assert place is not None
            self.report.add(scenario, expected, got + messages.key_not_deduplicated(place), "fail")
        elif ignored:
            assert place is not None
            self.report.add(scenario, expected, got + messages.key_ignored(place), "warn")
        elif count > 1:
            self.report.add(scenario, expected, got + messages.TWICE, "fail")
        elif count == 0:
            self.report.add(scenario, expected, got + messages.NONE_FOUND, "fail")
        else:
            self.report.add(scenario, expected, got, "pass")
        self.whole_run(ref if ignored else None)

    def whole_run(self, ignored: str | None) -> None:
        counts = {written: self.target.count(written) for written in dict.fromkeys(self.written)}
        known = {key: value for key, value in counts.items() if value is not None}
        judged = {key: value for key, value in known.items() if key != ignored}
        worst = max(judged.values(), default=0)
        doubled = sorted(key.rsplit("/", 1)[-1] for key, value in judged.items() if value > 1)
        got = f"{len(known)} operation_refs counted, at most {worst} each"
        if ignored is not None:
            got += " (the retry's second record aside: the downstream ignores the key)"
        self.report.add(
            "effects per operation_ref over the whole run",
            "at most one each",
            got + (f"; more than one: {', '.join(doubled)}" if doubled else ""),
            "pass" if worst <= 1 else "fail",
        )


def run_scenarios(target: Target, sample: Mapping[str, Any], run_id: str | None = None) -> Report:
    """Every scenario against ``target``; the caller closes the target."""
    return Run(target, sample, run_id).run()
