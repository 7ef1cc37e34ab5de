"""Read a YAML data file under variants/, turning I/O and syntax errors into DataError (file, key, cause)."""

from __future__ import annotations

from pathlib import Path

import yaml

from faforge.errors import DataError


def load_yaml(path: Path):
    try:
        return yaml.safe_load(path.read_text())
    except OSError as exc:
        raise DataError(path, "(file)", f"cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise DataError(path, "(file)", f"not valid YAML: {exc}") from None
