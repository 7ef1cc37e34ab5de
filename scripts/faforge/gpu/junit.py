"""pytest's junit.xml as plain records, one per test case, and their counts by outcome.

Apart from the run because the records are what the summary, its JSON schema and the verdict
read, and they are tested on their own, without a pytest child.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

OUTCOMES = ("passed", "failed", "error", "skipped")


def parse_junit(path: Path) -> list[dict]:
    """One record per test case: id, outcome (passed/failed/error/skipped), duration and message."""
    records = []
    for case in ET.parse(path).getroot().iter("testcase"):
        if case.get("name") is None:  # pytest's entry for the test a KeyboardInterrupt (time cap) stopped
            continue
        module = case.get("classname", "").rsplit(".", 1)[-1]
        outcome, message = "passed", None
        for tag in ("failure", "error", "skipped"):
            element = case.find(tag)
            if element is not None:
                outcome = "failed" if tag == "failure" else tag
                message = element.get("message") or (element.text or "").strip() or None
                break
        records.append(
            {
                "id": f"{module}.py::{case.get('name')}",
                "outcome": outcome,
                "duration_s": float(case.get("time", 0)),
                "message": message,
            }
        )
    return records


def count_outcomes(tests: list[dict]) -> dict[str, int]:
    return {outcome: sum(t["outcome"] == outcome for t in tests) for outcome in OUTCOMES}
