"""What FlashAttention-4 looks like from inside an interpreter: the versions of its distributions and the shape of
its import package, then a real `import flash_attn.cute`. Printed as marked JSON lines, one per stage.

faforge feeds this file's text to the *target* interpreter (`python - MODULE NAMESPACE DIST...`,
faforge.families.flash_attn_4.doctor_facts), so it runs on any CPython 3.8+ with the standard library only and
imports nothing of faforge. Versions come from the distributions' metadata as the target sees them
(importlib.metadata, in its sys.path order): `flash_attn.cute.__version__` is always 0.0.0 (the wheel asks
metadata for a distribution named `fa4`). The import package is found without running it (find_spec of a
top-level name), so a broken flash-attn 2 beside it cannot stop the first stage:

  fa4-dists   {"versions": {dist: version or null}, "namespace": {"init": file or null, "paths": [...]}}
  fa4-import  {"ok": bool, "error": {"type", "message", "where"} or absent}
"""

import importlib
import importlib.util
import json
import sys
import traceback

MARK = "@@faforge-probe@@"
MESSAGE_CAP = 8000  # as faforge.doctor.probe: a message past it is cut
if len(sys.argv) < 3:
    sys.exit("usage: python - MODULE NAMESPACE DIST... < this probe (faforge.families.flash_attn_4.doctor_facts)")
MODULE, NAMESPACE, DISTS = sys.argv[1], sys.argv[2], sys.argv[3:]


def emit(stage, data):
    data["stage"] = stage
    sys.stdout.write(MARK + json.dumps(data) + "\n")
    sys.stdout.flush()


def version_of(name):
    try:
        from importlib import metadata  # noqa: PLC0415 (Python 3.8+; a missing module is no version)

        return str(metadata.version(name))
    except Exception:
        return None


def namespace():
    """The top-level package's __init__.py (a regular package: flash-attn 2's) or None (a namespace package), and
    the folders it spans."""
    try:
        spec = importlib.util.find_spec(NAMESPACE)
    except Exception:
        spec = None
    if spec is None:
        return {"init": None, "paths": []}
    origin = spec.origin if isinstance(spec.origin, str) and spec.origin.endswith("__init__.py") else None
    return {"init": origin, "paths": [str(p) for p in (spec.submodule_search_locations or [])]}


def import_module():
    try:
        importlib.import_module(MODULE)
    except BaseException as exc:  # a broken dependency raises anything from ImportError to RuntimeError
        try:
            message = str(exc)
        except BaseException:
            message = "(its message cannot be read)"
        frames = traceback.extract_tb(exc.__traceback__)
        where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        return {"ok": False, "error": {"type": type(exc).__name__, "message": message[:MESSAGE_CAP], "where": where}}
    return {"ok": True}


emit("fa4-dists", {"versions": {name: version_of(name) for name in DISTS}, "namespace": namespace()})
emit("fa4-import", import_module())
