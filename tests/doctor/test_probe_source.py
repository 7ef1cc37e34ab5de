"""The probe as the target interpreter gets it: one text, Python 3.8 syntax, no faforge import, and runnable."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from faforge.doctor import probe_source
from faforge.doctor.probe_lines import MARK


def test_the_probe_is_one_text_of_python_38_that_imports_only_the_standard_library():
    source = probe_source.probe_source()
    tree = ast.parse(source, feature_version=(3, 8))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert not {name for name in imported if name.split(".")[0] == "faforge"}, imported
    assert not {name for name in imported if name == "__future__"}, "a __future__ import mid-text is a SyntaxError"
    assert probe_source.PROBE_FILES.read_text() in source


def test_the_joined_probe_runs_with_the_standard_library_only(tmp_path):
    command = [sys.executable, "-I", "-S", "-", "no_such_extension", "no-such-package", "no-kernels"]
    result = subprocess.run(
        command, input=probe_source.probe_source(), capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    stages = [json.loads(line[len(MARK) :])["stage"] for line in result.stdout.splitlines() if line.startswith(MARK)]
    assert result.returncode == 0 and stages == ["env", "torch", "import"], result.stderr


def test_a_probe_without_its_one_include_line_is_refused(tmp_path, monkeypatch):
    probe = tmp_path / "probe.py"
    probe.write_text("import os\n")
    monkeypatch.setattr(probe_source, "PROBE", probe)
    with pytest.raises(RuntimeError, match="has 0 lines starting"):
        probe_source.probe_source()
