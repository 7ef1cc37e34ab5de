"""No module of scripts/faforge is over MAX_LINES lines (STYLE.md: one concern per module).

Reviewers read a module whole; past a few hundred lines a module holds more than one concern, and the
split that would name them is the change to make, not a longer file. The count is `wc -l`'s: every line,
docstrings and blank lines included, as the tree is formatted (ruff format, line length 120).
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "scripts" / "faforge"
MAX_LINES = 300


def oversized(package: Path = PACKAGE, limit: int = MAX_LINES) -> dict[str, int]:
    """Path under `package` -> its line count, for every .py over `limit` lines."""
    counts = {str(path.relative_to(package)): len(path.read_text().splitlines()) for path in package.rglob("*.py")}
    return {path: n for path, n in sorted(counts.items()) if n > limit}


def test_no_module_is_over_the_limit():
    over = oversized()
    assert not over, f"over {MAX_LINES} lines; split by concern: " + ", ".join(f"{p} ({n})" for p, n in over.items())


def test_the_count_names_a_module_over_the_limit(tmp_path):
    (tmp_path / "short.py").write_text("x = 1\n" * 3)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "long.py").write_text("x = 1\n" * 4)
    assert oversized(tmp_path, limit=3) == {"sub/long.py": 4}
