"""Small, valid wheels for the index tests: a zip with a package, its .dist-info (METADATA, WHEEL, RECORD
with every member's sha256, as PEP 427 and pip's installer check them). They stand for the glue, kernel
and FA3 wheels in name, version, tags and metadata, so that real pip and real uv can find, resolve,
download and install them from the index in a second; the real wheels come from faforge.pipwheel."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from faforge.family import FLASH_ATTN, FLASH_ATTN_3

SDIST_VERSION = "2.8.3.post2"
KERNEL_LOCAL = "cu130.sm80.90.100.120ptx.philox64.ha5d2e90"
KERNEL_VERSION = f"{SDIST_VERSION}+{KERNEL_LOCAL}"
LINUX_X86 = "manylinux_2_28_x86_64"


@dataclass(frozen=True)
class Spec:
    dist: str  # the distribution's name as its file name spells it (flash_attn)
    version: str
    tag: str  # python-abi-platform
    requires_python: str | None = ">=3.12,<3.13"
    requires_dist: tuple[str, ...] = ()
    build: str | None = None  # the build tag
    package: str = "pkg"
    payload: str = "x = 1\n"
    extra: dict = field(default_factory=dict)  # more METADATA lines

    @property
    def filename(self) -> str:
        build = f"-{self.build}" if self.build else ""
        return f"{self.dist}-{self.version}{build}-{self.tag}.whl"

    @property
    def name(self) -> str:
        return self.dist.replace("_", "-")


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def metadata_text(spec: Spec) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {spec.name}", f"Version: {spec.version}"]
    if spec.requires_python:
        lines.append(f"Requires-Python: {spec.requires_python}")
    lines += [f"Requires-Dist: {r}" for r in spec.requires_dist]
    lines += [f"{k}: {v}" for k, v in spec.extra.items()]
    return "\n".join(lines) + "\n\n"


def build_wheel(spec: Spec, folder: Path) -> Path:
    """folder/<spec.filename>, deterministic (fixed member dates)."""
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{spec.dist}-{spec.version}.dist-info"
    python, abi, platform = spec.tag.split("-")
    wheel = ["Wheel-Version: 1.0", "Generator: faforge-tests", "Root-Is-Purelib: false",
             *(f"Tag: {p}-{a}-{t}" for p in python.split(".") for a in abi.split(".") for t in platform.split("."))]
    if spec.build:
        wheel.append(f"Build: {spec.build}")
    members = {f"{spec.package}/__init__.py": spec.payload.encode(), f"{info}/METADATA": metadata_text(spec).encode(),
               f"{info}/WHEEL": ("\n".join(wheel) + "\n").encode()}
    record = [_record_line(n, d) for n, d in members.items()] + [f"{info}/RECORD,,"]
    members[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = folder / spec.filename
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), data)
    return path


def glue(torch: str = "2.11", cuda: str = "130", python: str = "312", abi: int = 1, *, kernel: str = KERNEL_VERSION,
         payload: str = "x = 1\n", build: str = "0h1234567", pin_torch: bool = False) -> Spec:
    """A flash-attn glue wheel of one (torch minor, CUDA, Python, ABI), pinning its kernel wheel exactly (and,
    with `pin_torch`, its torch minor as the real glue does: the resolver tests have no torch to offer)."""
    major, minor = torch.split(".")
    pins = (f"torch>={torch},<{major}.{int(minor) + 1}",) if pin_torch else ()
    return Spec(FLASH_ATTN.dist_name, f"{SDIST_VERSION}+torch{torch}.cu{cuda}.abi{abi}", f"cp{python}-cp{python}-{LINUX_X86}",
                requires_python=f">={python[0]}.{python[1:]},<{python[0]}.{int(python[1:]) + 1}",
                requires_dist=(*pins, f"{FLASH_ATTN.kernel_package}=={kernel}"), build=build, package=FLASH_ATTN.module,
                payload=payload)


def kernel(local: str = KERNEL_LOCAL, payload: str = "") -> Spec:
    return Spec(FLASH_ATTN.kernel_package.replace("-", "_"), f"{SDIST_VERSION}+{local}", f"py3-none-{LINUX_X86}",
                requires_python=">=3.9", build="0", package="libkernels_standin", payload=payload)


def fa3(cuda: str = "130", torch_spec: str = ">=2.9") -> Spec:
    return Spec(FLASH_ATTN_3.module, f"3.0.0+cu{cuda}.sm80.90a", f"cp310-abi3-{LINUX_X86}", requires_python=">=3.10",
                requires_dist=(f"torch{torch_spec}",), package=FLASH_ATTN_3.module)


def record_gates(manifest: Path, wheel: Path, gates=("abi", "import", "gpu"), result: str = "passed") -> None:
    """Gate results for the wheel's exact sha256, as `faforge verify` records them (release.manifest.record)."""
    from types import SimpleNamespace  # noqa: PLC0415

    from faforge.pipwheel.facts import read_wheel  # noqa: PLC0415
    from faforge.release.manifest import record  # noqa: PLC0415

    facts = read_wheel(wheel)
    for gate in gates:
        record(manifest, SimpleNamespace(sha256=facts.sha256, filename=facts.filename, cell_id=None, path=wheel), gate, result, "test")
