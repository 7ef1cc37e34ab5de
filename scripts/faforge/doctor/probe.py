"""Facts about a Python environment, gathered by its own interpreter and printed as JSON lines.

faforge feeds this file's source to the *target* interpreter (`python -`), so
it must work on any CPython 3.8+ with nothing but the standard library, and it
must not import faforge (which is not installed there): its one faforge import, of
its file reader, is replaced by that module's text (faforge.doctor.probe_source). It prints one marked
JSON line per stage, flushing after each, so that a crash in a later stage
(importing a broken extension can segfault) still leaves the earlier facts:

  env     interpreter, platform, glibc, conda records, dist-infos, extension files, and the metadata
          files it could not read (a corrupt direct_url.json or conda-meta record is a finding,
          never a reason to stop)
  torch   what `import torch` reports (version, CUDA, C++ ABI, devices)
  import  the outcome of `import flash_attn_2_cuda` after torch, as flash_attn does it

The family's names come as arguments (`python - EXTENSION PACKAGE KERNEL_PACKAGE`, from
faforge.family through probe_run), since faforge.family cannot be imported here.
"""

import glob
import importlib.util
import json
import os
import platform
import re
import sys
import sysconfig

from faforge.doctor.probe_files import read_json, read_text, text_field  # its text, in the target (probe_source)

MARK = "@@faforge-probe@@"
# The most characters of an error message reported (an undefined symbol's message is a few hundred).
MESSAGE_CAP = 8000
if len(sys.argv) != 4:
    sys.exit("usage: python - EXTENSION PACKAGE KERNEL_PACKAGE < the probe (faforge.doctor.probe_run passes them)")
EXTENSION, PACKAGE, KERNEL_PACKAGE = sys.argv[1:]
# The CUDA runtime a PyPI torch requires, which says its CUDA even when it cannot be imported:
# torch-2.4.0 "Requires-Dist: nvidia-cuda-runtime-cu12 (==12.1.105) ; ...", torch-2.7.1
# "nvidia-cuda-runtime-cu12==12.6.77", torch-2.14.1 "cuda-toolkit[cudart]==13.0.3".
CUDA_RUNTIME = re.compile(
    r"Requires-Dist: *(?:nvidia-cuda-runtime(?:-cu\d+)?|cuda-toolkit\[[^]]*cudart[^]]*\]) *\(?==(\d+\.\d+)"
)
# conda packages that make up a torch stack; their channels tell the torch world apart.
# pyvenv.cfg keys that say which tool made a venv (uv writes `uv = X`, virtualenv `virtualenv = X`).
VENV_KEYS = ("uv", "virtualenv", "version", "version_info", "home", "include-system-site-packages")
CONDA_PACKAGES = (
    "python",
    "pytorch",
    "libtorch",
    "pytorch-cuda",
    "pytorch-mutex",
    "pytorch-gpu",
    "pytorch-cpu",
    "torchvision",
    "torchaudio",
    PACKAGE,
    KERNEL_PACKAGE,
    "cuda-version",
    "cuda-cudart",
    "cudatoolkit",
)


def emit(stage, data):
    data["stage"] = stage
    sys.stdout.write(MARK + json.dumps(data) + "\n")
    sys.stdout.flush()


def glibc():
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION")  # "glibc 2.36"
    except (AttributeError, ValueError, OSError):
        text = None
    if text and text.startswith("glibc "):
        return text.split()[1]
    name, version = platform.libc_ver()
    return version if name == "glibc" and version else None


def site_dirs():
    dirs = []
    for entry in sys.path:
        if entry and os.path.isdir(entry) and entry not in dirs:
            dirs.append(os.path.abspath(entry))
    return dirs


def dist_infos(unreadable):
    """Every torch / flash-attn .dist-info or .egg-info on sys.path, in import order."""
    found = []
    for directory in site_dirs():
        for pattern in ("*.dist-info", "*.egg-info"):
            for meta in sorted(glob.glob(os.path.join(directory, pattern))):
                base = os.path.basename(meta).rsplit(".", 1)[0]
                name = base.split("-")[0].lower().replace("_", "-")
                if name not in ("torch", PACKAGE):
                    continue
                metadata = read_text(os.path.join(meta, "METADATA")) or read_text(os.path.join(meta, "PKG-INFO")) or ""
                version = next(
                    (line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Version:")),
                    None,
                )
                cuda_runtime = next((m.group(1) for m in map(CUDA_RUNTIME.match, metadata.splitlines()) if m), None)
                direct_path = os.path.join(meta, "direct_url.json")
                direct = read_json(direct_path, unreadable)
                found.append(
                    {
                        "name": name,
                        "version": version,
                        "path": meta,
                        "site": directory,
                        "installer": (read_text(os.path.join(meta, "INSTALLER")) or "").strip() or None,
                        "direct_url": text_field(direct, "url", direct_path, unreadable) if direct else None,
                        "cuda_runtime": cuda_runtime,
                    }
                )
    return found


def conda_records(prefix, unreadable):
    """The conda-meta records of the torch stack, with which of their files are dist-infos."""
    meta = os.path.join(prefix, "conda-meta")
    if not os.path.isdir(meta):
        return None
    records = []
    for path in sorted(glob.glob(os.path.join(meta, "*.json"))):
        record = read_json(path, unreadable)
        if record is None or record.get("name") not in CONDA_PACKAGES:
            continue
        fields = {key: text_field(record, key, path, unreadable) for key in ("version", "build", "channel")}
        files = record.get("files") or []
        if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            unreadable.append({"path": path, "reason": "'files' is not a list of paths"})
            files = []
        records.append(
            {
                "name": record.get("name"),
                "version": fields["version"] or "",
                "build": fields["build"] or "",
                "channel": fields["channel"] or "",
                "depends": [str(d) for d in record.get("depends") or []]
                if isinstance(record.get("depends") or [], list)
                else [],
                "dist_infos": sorted({p.split(".dist-info/")[0] + ".dist-info" for p in files if ".dist-info/" in p}),
            }
        )
    return records


def extension_files():
    files = []
    for directory in site_dirs():
        for path in sorted(glob.glob(os.path.join(directory, EXTENSION + "*.so"))):
            files.append(os.path.abspath(path))
    return files


def externally_managed():
    """PEP 668: the distribution manages this Python's packages (a venv made from it is not managed)."""
    if sys.prefix != getattr(sys, "base_prefix", sys.prefix):
        return False
    return os.path.isfile(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))


def venv_config(unreadable):
    """The `key = value` lines of the venv's pyvenv.cfg (`uv = 0.13.9` where uv made it), or None outside a venv."""
    if sys.prefix == getattr(sys, "base_prefix", sys.prefix):
        return None
    path = os.path.join(sys.prefix, "pyvenv.cfg")
    problem: list[str] = []
    text = read_text(path, problem)
    if problem:
        unreadable.append({"path": path, "reason": problem[0]})
    keys = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() in VENV_KEYS:
            keys[key.strip()] = value.strip()
    return keys


def env_facts():
    spec = importlib.util.find_spec(EXTENSION)
    torch_spec = importlib.util.find_spec("torch")
    unreadable: list[dict[str, str]] = []
    conda = conda_records(sys.prefix, unreadable)
    distributions = dist_infos(unreadable)
    return {
        "python": {
            "executable": sys.executable,
            "version": ".".join(map(str, sys.version_info[:3])),
            "implementation": sys.implementation.name,
            "soabi": sysconfig.get_config_var("SOABI"),
            "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"),
            "prefix": sys.prefix,
            "externally_managed": externally_managed(),
            "venv": venv_config(unreadable),
            "pip": importlib.util.find_spec("pip") is not None,
        },
        "system": {
            "os": platform.system(),
            "machine": platform.machine(),
            "glibc": glibc(),
            "ld_library_path": [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d],
        },
        "site_dirs": site_dirs(),
        "conda": conda,
        "distributions": distributions,
        "unreadable_metadata": unreadable,
        "torch_package": os.path.dirname(torch_spec.origin) if torch_spec and torch_spec.origin else None,
        "extension": spec.origin if spec and spec.origin else None,
        "extension_files": extension_files(),
    }


def error_of(exc):
    """An exception as faforge reads it: a message past MESSAGE_CAP characters is cut (faforge reads the
    probe's output under a cap), and one whose str() fails is said to be unreadable."""
    try:
        message = str(exc)
    except BaseException:
        message = "(its message cannot be read)"
    return {"type": str(type(exc).__name__), "message": message[:MESSAGE_CAP]}


def torch_facts():
    try:
        import torch  # noqa: PLC0415 (its import is the torch stage: a broken torch is a finding, not a crash)
    except BaseException as exc:  # a broken torch raises anything from ImportError to OSError
        return {"imported": False, "error": error_of(exc)}
    cuda = getattr(getattr(torch, "version", None), "cuda", None)
    devices: list[dict[str, object]] = []
    facts = {
        "imported": True,
        "version": str(torch.__version__),
        "cuda": None if cuda is None else str(cuda),
        "cxx11_abi": None,
        "devices": devices,
        "cuda_available": False,
    }
    try:
        facts["cxx11_abi"] = int(bool(torch._C._GLIBCXX_USE_CXX11_ABI))
    except AttributeError:
        pass
    try:
        facts["cuda_available"] = bool(torch.cuda.is_available())
        if facts["cuda_available"]:
            for index in range(torch.cuda.device_count()):
                major, minor = torch.cuda.get_device_capability(index)
                devices.append({"name": str(torch.cuda.get_device_name(index)), "capability": [int(major), int(minor)]})
    except BaseException as exc:
        facts["cuda_error"] = error_of(exc)
    return facts


def import_extension():
    try:
        importlib.import_module(EXTENSION)
    except BaseException as exc:
        return {"ok": False, "error": error_of(exc)}
    return {"ok": True}


def main():
    emit("env", env_facts())
    emit("torch", torch_facts())
    emit("import", import_extension())


main()
