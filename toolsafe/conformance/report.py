"""The conformance report: one row per scenario (expected, got, verdict), as a text table
or JSON; any ``fail`` makes the run fail."""

from __future__ import annotations

import json
import textwrap
from dataclasses import asdict, dataclass, field
from typing import Literal

Verdict = Literal["pass", "fail", "warn", "skip"]


@dataclass(frozen=True)
class Check:
    """One scenario's outcome."""

    scenario: str
    expected: str
    got: str
    verdict: Verdict


@dataclass
class Report:
    tool: str
    kind: str
    checks: list[Check] = field(default_factory=list)
    # Where the run wrote (the line printed before anything was sent).
    target: str = ""

    def add(self, scenario: str, expected: str, got: str, verdict: Verdict) -> Check:
        check = Check(scenario, expected, got, verdict)
        self.checks.append(check)
        return check

    @property
    def failures(self) -> list[Check]:
        return [check for check in self.checks if check.verdict == "fail"]

    @property
    def passed(self) -> bool:
        return not self.failures

    def counts(self) -> dict[str, int]:
        found = {"pass": 0, "fail": 0, "warn": 0, "skip": 0}
        for check in self.checks:
            found[check.verdict] += 1
        return found

    def to_json(self) -> dict[str, object]:
        return {
            "tool": self.tool,
            "kind": self.kind,
            "target": self.target,
            "passed": self.passed,
            "counts": self.counts(),
            "checks": [asdict(check) for check in self.checks],
        }

    def text(self, width: int = 44) -> str:
        """The table: scenario → expected → got, wrapped to fit a terminal."""
        rows = [("", "scenario", "expected", "got")]
        rows += [(c.verdict.upper(), c.scenario, c.expected, c.got) for c in self.checks]
        widths = [4, 34, width, width]
        lines: list[str] = []
        for number, row in enumerate(rows):
            cells = [
                textwrap.wrap(text, size) or [""] for text, size in zip(row, widths, strict=True)
            ]
            for index in range(max(len(cell) for cell in cells)):
                parts = [
                    (cell[index] if index < len(cell) else "").ljust(size)
                    for cell, size in zip(cells, widths, strict=True)
                ]
                lines.append("  ".join(parts).rstrip())
            if number == 0:
                lines.append("  ".join("-" * size for size in widths))
        counts = self.counts()
        verdict = "PASSED" if self.passed else "FAILED"
        lines.append("")
        if self.target:
            lines.append(f"target: {self.target}")
        lines.append(
            f"{self.tool} ({self.kind}): {verdict} - {counts['pass']} passed, "
            f"{counts['fail']} failed, {counts['warn']} warnings, {counts['skip']} skipped"
        )
        return "\n".join(lines) + "\n"

    def json_text(self) -> str:
        return json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n"


class ConformanceFailure(AssertionError):
    """Raised by :meth:`assert_conforms` with the failing rows in its message."""


def assert_conforms(report: Report) -> None:
    """Fail a test when any scenario failed, showing the whole table."""
    if not report.passed:
        raise ConformanceFailure("\n" + report.text())
