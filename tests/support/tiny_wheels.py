"""Small, valid wheels for the index tests, written by faforge.pipwheel.writer: one Python file each. They
stand for the glue, kernel and FA3 wheels in name, version, tags and metadata, so that real pip and real
uv can find, resolve, download and install them from the index in a second; the real glue and kernel
wheels (the conda builds' binaries, repacked) come from faforge.pipwheel's packers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from faforge.family import FLASH_ATTN, FLASH_ATTN_3
from faforge.pipwheel.facts import read_wheel
from faforge.pipwheel.writer import WheelSpec, write_wheel
from faforge.release.manifest import record

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

    @property
    def filename(self) -> str:
        build = f"-{self.build}" if self.build else ""
        return f"{self.dist}-{self.version}{build}-{self.tag}.whl"

    @property
    def name(self) -> str:
        return self.dist.replace("_", "-")


def build_wheel(spec: Spec, folder: Path) -> Path:
    """folder/<spec.filename>, written by faforge.pipwheel.writer (deterministic: the same spec, the same bytes)."""
    python, abi, platform = spec.tag.split("-")
    path = write_wheel(
        WheelSpec(
            name=spec.name,
            version=spec.version,
            python_tags=tuple(python.split(".")),
            abi_tags=tuple(abi.split(".")),
            platform_tags=tuple(platform.split(".")),
            files={f"{spec.package}/__init__.py": spec.payload.encode()},
            build_tag=spec.build,
            requires_python=spec.requires_python,
            requires_dist=spec.requires_dist,
        ),
        folder,
    )
    assert path.name == spec.filename, (path.name, spec.filename)
    return path


def glue(
    torch: str = "2.11",
    cuda: str = "130",
    python: str = "312",
    abi: int = 1,
    *,
    kernel: str = KERNEL_VERSION,
    payload: str = "x = 1\n",
    build: str = "0h1234567",
    pin_torch: bool = False,
) -> Spec:
    """A flash-attn glue wheel of one (torch minor, CUDA, Python, ABI), pinning its kernel wheel exactly (and,
    with `pin_torch`, its torch minor as the real glue does: the resolver tests have no torch to offer)."""
    major, minor = torch.split(".")
    pins = (f"torch>={torch},<{major}.{int(minor) + 1}",) if pin_torch else ()
    return Spec(
        FLASH_ATTN.dist_name,
        f"{SDIST_VERSION}+torch{torch}.cu{cuda}.abi{abi}",
        f"cp{python}-cp{python}-{LINUX_X86}",
        requires_python=f">={python[0]}.{python[1:]},<{python[0]}.{int(python[1:]) + 1}",
        requires_dist=(*pins, f"{FLASH_ATTN.kernel_package}=={kernel}"),
        build=build,
        package=FLASH_ATTN.module,
        payload=payload,
    )


def kernel(local: str = KERNEL_LOCAL, payload: str = "") -> Spec:
    return Spec(
        FLASH_ATTN.kernel_package.replace("-", "_"),
        f"{SDIST_VERSION}+{local}",
        f"py3-none-{LINUX_X86}",
        requires_python=">=3.9",
        build="0",
        package="libkernels_standin",
        payload=payload,
    )


def fa3(cuda: str = "130", torch_spec: str = ">=2.9") -> Spec:
    return Spec(
        FLASH_ATTN_3.module,
        f"3.0.0+cu{cuda}.sm80.90a",
        f"cp310-abi3-{LINUX_X86}",
        requires_python=">=3.10",
        requires_dist=(f"torch{torch_spec}",),
        package=FLASH_ATTN_3.module,
    )


def record_gates(manifest: Path, wheel: Path, gates=("abi", "import", "gpu"), result: str = "passed") -> None:
    """Gate results for the wheel's exact sha256, as `faforge verify` records them (release.manifest.record)."""
    facts = read_wheel(wheel)
    for gate in gates:
        record(
            manifest,
            SimpleNamespace(sha256=facts.sha256, filename=facts.filename, cell_id=None, path=wheel),
            gate,
            result,
            "test",
        )
