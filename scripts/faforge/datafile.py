"""Read a YAML data file (under variants/, or one a user names), turning I/O, size, encoding, syntax and
nesting errors into errors naming the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from faforge.errors import DataError
from faforge.paths import read_user_file

# libyaml's parser: every command reads several variants files, 10x faster than the pure-Python parser; a PyYAML
# built without libyaml has no CSafeLoader and reads the same data, slower.
SafeLoader: type[yaml.SafeLoader] | type[yaml.CSafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(path: Path, *, hint: str | None = None) -> Any:
    text = read_user_file(path, hint=hint)
    try:
        return yaml.load(text, Loader=SafeLoader)
    except RecursionError:  # PyYAML composes nested collections recursively (libyaml stops at depth 1000 itself)
        raise DataError(path, "(file)", "nests too deeply to be data") from None
    except yaml.YAMLError as exc:
        raise DataError(path, "(file)", f"not valid YAML: {exc}") from None
