"""Identity digests follow behaviour, not formatting (faforge.matrix.canonical), on the real input files.

Every Python input is rewritten the way a formatter or a comment sweep would rewrite it (ast.unparse:
every comment gone, every line re-laid, quotes and parentheses normalised) and must keep its digest; an
edit a reader acts on (a constant, a name) must move it."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from faforge.family import FLASH_ATTN, FLASH_ATTN_3
from faforge.matrix.canonical import canonical_bytes
from faforge.matrix.inputs import family_input_digests, input_digests, input_files
from tests.support.debian_toolchains import DebianUnavailable, amd64_python_3_13
from tests.support.tiers import slow

REPO = Path(__file__).resolve().parents[2]
ENTRIES = FLASH_ATTN.kernel_inputs + FLASH_ATTN.glue_inputs + FLASH_ATTN_3.inputs
PYTHON_INPUTS = [p for p in input_files(REPO, ENTRIES) if p.suffix == ".py"]


def reformatted(text: str) -> str:
    return ast.unparse(ast.parse(text)) + "\n"


def without_docstrings(text: str) -> str:
    tree = ast.parse(text)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def test_the_real_python_inputs_are_many_and_commented():
    assert len(PYTHON_INPUTS) > 40
    assert sum("#" in p.read_text() for p in PYTHON_INPUTS) > 20, "the sweep below must remove real comments"


@pytest.mark.parametrize("path", PYTHON_INPUTS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_comments_docstrings_and_layout_do_not_count(path):
    text = path.read_text()
    base = canonical_bytes(path, text.encode())
    assert canonical_bytes(path, reformatted(text).encode()) == base
    assert canonical_bytes(path, without_docstrings(text).encode()) == base


@pytest.mark.parametrize(
    "edit",
    [
        ("FAST_TIMEOUT = 60\n", "FAST_TIMEOUT = 61\n"),
        ("def f(a, b):\n    return a - b\n", "def f(a, b):\n    return b - a\n"),
        ("x = 'sm80'\n", "x = 'sm90'\n"),
        ("def f():\n    pass\n", "async def f():\n    pass\n"),
        ("def f(a):\n    return a\n", "def f(b):\n    return b\n"),
        ("def f():\n    '''doc'''\n    return 1\n", "def f():\n    '''doc'''\n    'not a docstring'\n    return 1\n"),
    ],
)
def test_what_a_reader_acts_on_counts(edit):
    before, after = edit
    assert canonical_bytes(Path("m.py"), before.encode()) != canonical_bytes(Path("m.py"), after.encode())


def test_data_files_count_by_their_data():
    assert canonical_bytes(Path("a.yaml"), b"a: 1  # note\nb: [2, 3]\n") == canonical_bytes(
        Path("a.yaml"), b"a: 1\nb:\n  - 2\n  - 3\n"
    )
    assert canonical_bytes(Path("a.yaml"), b"a: 1\nb: 2\n") != canonical_bytes(Path("a.yaml"), b"b: 2\na: 1\n")
    assert canonical_bytes(Path("a.json"), b'{"a": [1, 2]}') == canonical_bytes(
        Path("a.json"), b'{\n  "a": [\n    1,\n    2\n  ]\n}\n'
    )
    # compiled sources, shell and anything that does not parse count by their bytes
    assert canonical_bytes(Path("a.cpp"), b"int x; // c\n") != canonical_bytes(Path("a.cpp"), b"int x;\n")
    assert canonical_bytes(Path("a.py"), b"def (:\n") == b"def (:\n"


def test_a_whole_sweep_over_a_checkout_moves_no_identity(tmp_path):
    for name in ("variants", "recipes", "scripts"):
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    before = {**input_digests(tmp_path), **family_input_digests(tmp_path, FLASH_ATTN_3)}
    for path in input_files(tmp_path, ENTRIES):
        if path.suffix == ".py":
            path.write_text(without_docstrings(reformatted(path.read_text())))
    assert {**input_digests(tmp_path), **family_input_digests(tmp_path, FLASH_ATTN_3)} == before
    kernel_source = tmp_path / "scripts/faforge/backend/flags.py"
    kernel_source.write_text(kernel_source.read_text() + "\n_AN_EDIT = 1\n")
    after = input_digests(tmp_path)
    assert after["kernel_inputs"] != before["kernel_inputs"] and after["glue_inputs"] == before["glue_inputs"]


CANONICAL_DIGESTS = """
import hashlib, importlib.util, json, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("canonical", sys.argv[1])
canonical = importlib.util.module_from_spec(spec)
spec.loader.exec_module(canonical)
paths = [Path(p) for p in sys.argv[2:]]
print(json.dumps({str(p): hashlib.sha256(canonical.canonical_bytes(p, p.read_bytes())).hexdigest() for p in paths}))
"""


@pytest.fixture(scope="module")
@slow("downloads and unpacks Debian trixie's python3.13 (about 7 MB)")
def python_3_13():
    try:
        return amd64_python_3_13()
    except DebianUnavailable as exc:
        pytest.skip(f"Debian's python3.13 is not available: {exc}")


def test_the_canonical_form_is_the_same_on_another_python(python_3_13):
    """`faforge generate` on a contributor's Python 3.13 must write the variant files CI's 3.11 checks: the
    form leaves out what 3.12 added to every tree (type_params=[])."""
    import yaml  # noqa: PLC0415 (only for its folder: the other Python reads YAML with the same pure-Python package)

    paths = [str(p) for p in input_files(REPO, ENTRIES) if p.suffix in (".py", ".yaml", ".json")]
    module = REPO / "scripts/faforge/matrix/canonical.py"
    env = dict(os.environ, PYTHONPATH=str(Path(yaml.__file__).parents[1]))
    done = subprocess.run(
        [*python_3_13, "-s", "-c", CANONICAL_DIGESTS, str(module), *paths],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    other = json.loads(done.stdout)
    here = {p: hashlib.sha256(canonical_bytes(Path(p), Path(p).read_bytes())).hexdigest() for p in paths}
    assert (
        "3.13"
        in subprocess.run([*python_3_13, "-c", "import sys; print(sys.version)"], capture_output=True, text=True).stdout
    )
    assert len(here) > 40 and other == here
