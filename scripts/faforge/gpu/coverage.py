"""Kernel TU coverage on a GPU: the TUs the profiler saw each test launch against the emulated dispatch.

The suite's conftest writes kernels.json ({"sms": N, "tests": {node id: [TU, ...]}}) when test-gpu asks;
this compares it with faforge.gpu.suite.cases.launch_table for that GPU's SM count. It is a report, not a
verdict: a TU never seen, or a test that reached other TUs than emulated, is shown, and the suite's own
numerics decide pass or fail. Standard library only.
"""

from __future__ import annotations

from faforge.gpu.dispatch import package_tus
from faforge.gpu.suite.cases import launch_table

# Where the suite's conftest writes the kernel TUs each test launched (set by faforge test-gpu).
KERNELS_JSON_ENV = "FAFORGE_GPU_KERNELS_JSON"


def compare(observed: dict, head_dims: tuple[int, ...]) -> dict:
    """The coverage record that test-gpu's summary carries (tests/schemas/test-gpu.json, kernel_coverage)."""
    seen_by_test = {test: set(tus) for test, tus in observed["tests"].items()}
    expected = {test: {launch.tu for launch in launches} for test, launches in launch_table(head_dims, observed["sms"]).items()}
    seen = set().union(*seen_by_test.values())
    return {
        "sms": observed["sms"],
        "package_tus": len(package_tus()),
        "expected_tus": sorted(set().union(*expected.values())),
        "seen_tus": sorted(seen),
        "never_seen": sorted(set(package_tus()) - seen),
        "mismatches": [
            {"test": test, "expected": sorted(expected[test]), "seen": sorted(tus)}
            for test, tus in sorted(seen_by_test.items())
            if test in expected and tus != expected[test]
        ],
    }


def format_coverage(coverage: dict) -> list[str]:
    lines = [f"kernel TUs seen by the profiler: {len(coverage['seen_tus'])} of {coverage['package_tus']} ({coverage['sms']} SMs)"]
    if coverage["never_seen"]:
        lines.append(f"never launched: {', '.join(coverage['never_seen'])}")
    lines += [f"dispatch differs from the emulation: {m['test']}: expected {m['expected']}, saw {m['seen']}" for m in coverage["mismatches"]]
    return lines
