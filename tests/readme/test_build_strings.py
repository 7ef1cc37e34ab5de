"""Every exact kernel package README.md or a docs page names is one the matrix builds today. A kernel build
string's hash follows its build inputs (faforge.family's kernel_inputs), so an edit to the backend renames every kernel
package; a documented command that still names the old file would send its reader to "does not exist"."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from tests.support.docs import REPO, all_text

KERNEL_FILE = re.compile(r"libflash-attn-kernels-[0-9][\w.]*-(?:cu\d+_\w+?_h[0-9a-f]{7}_\d+)\.conda")


def test_every_kernel_package_the_docs_name_is_built_by_the_matrix():
    named = set(KERNEL_FILE.findall(all_text()))
    assert named, "the docs name no exact kernel package: this test's pattern no longer matches their commands"
    listing = subprocess.run(
        [sys.executable, "-m", "faforge", "matrix", "--kernels", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=True,
    )
    built = {package["file"] for package in json.loads(listing.stdout)}
    stale = sorted(named - built)
    assert not stale, f"the docs name kernel packages the matrix no longer builds (faforge matrix --kernels): {stale}"
