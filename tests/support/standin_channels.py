"""Local stand-in channels for the solver proofs: real metadata, no real binaries.

Upstream packages (conda-forge, the legacy pytorch and nvidia channels) copy the real names,
versions, build strings and dependencies recorded, with sources, in
tests/fixtures/real_packages.yaml. Our flash-attn packages carry the run requirements
py-rattler-build renders for each cell, plus what a real build adds through run_exports
(compilers, sysroot, CUDA, python, torch), filled in from the fixture's sourced rules; the kernel
builds they pin (libflash-attn-kernels) are in our channel too.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from faforge.channel.local import PackageSpec, assemble, index
from faforge.matrix.kernels import kernel_pin
from faforge.matrix.render import RenderedCell
from faforge.versions import next_minor
from tests.support.standin_flash_attn import pinned_kernel_record

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "real_packages.yaml"
# Records nobody could find published (made-up build strings, sourced depends), declared there.
DERIVED = Path(__file__).resolve().parents[1] / "conda_world" / "world.yaml"
OUR_CHANNEL = "faforge"


def load_fixture() -> dict:
    fixture = yaml.safe_load(FIXTURE.read_text())
    fixture["packages"] += yaml.safe_load(DERIVED.read_text())["derived_records"]
    return fixture


def _cudart_version(fixture: dict, cuda: str, platform: str, channel: str) -> str:
    for pkg in fixture["packages"]:
        if (
            pkg["name"] == "cuda-cudart"
            and pkg["channel"] == channel
            and pkg["subdir"] == platform
            and pkg["version"].startswith(cuda + ".")
        ):
            return pkg["version"]
    raise LookupError(f"fixture has no cuda-cudart {cuda} for {platform} in {channel}")


def injected_run_exports(fixture: dict, rendered: RenderedCell) -> list[str]:
    """What compiler/sysroot/CUDA/python/torch run_exports add to a real build of this cell."""
    cell = rendered.cell
    major = int(cell.cuda.split(".")[0])
    gcc_major = max(int(cell.host_gcc), 12)
    py_next = next_minor(cell.python)
    specs = [f"libstdcxx >={gcc_major}", f"libgcc >={gcc_major}"]
    if cell.platform == "linux-64" or cell.c_stdlib_version != "2.17":
        specs.append(f"__glibc >={cell.c_stdlib_version},<3.0.a0")
    specs.append(f"cuda-version >={cell.cuda},<{major + 1}")
    if cell.platform == "linux-aarch64":
        specs.append("arm-variant * sbsa")
    cudart_channel = "conda-forge" if cell.world == "conda-forge" else "nvidia"
    try:
        cudart = _cudart_version(fixture, cell.cuda, cell.platform, cudart_channel)
        specs.append(f"cuda-cudart >={cudart},<{major + 1}.0a0")
    except LookupError:
        pass  # no stand-in for this CUDA: the cell is not solvable here anyway
    specs += [
        f"python >={cell.python},<{py_next}.0a0",
        f"python_abi {cell.python}.* *_cp{cell.python.replace('.', '')}",
    ]
    if cell.world == "conda-forge":
        upper = next_minor(cell.torch)
        specs += [f"pytorch >={cell.torch},<{upper}.0a0", f"libtorch >={cell.torch},<{upper}.0a0"]
    return specs


def kernel_run_exports(fixture: dict, rendered: RenderedCell) -> tuple[str, ...]:
    """A kernel package's depends: the recipe's cuda-version pin and the compilers' and cudart's run_exports."""
    keep = ("libstdcxx", "libgcc", "__glibc", "cuda-version", "cuda-cudart", "arm-variant")
    return tuple(s for s in injected_run_exports(fixture, rendered) if s.split()[0] in keep)


def build_channels(root: Path, rendered: list[RenderedCell]) -> dict[str, Path]:
    """Write and index every channel under root; returns channel name -> directory."""
    fixture = load_fixture()
    channels: dict[str, Path] = {}
    for pkg in fixture["packages"]:
        directory = channels.setdefault(pkg["channel"], root / pkg["channel"])
        assemble(
            PackageSpec(
                name=pkg["name"],
                version=str(pkg["version"]),
                build=pkg["build"],
                subdir=pkg["subdir"],
                depends=tuple(pkg.get("depends") or ()),
                constrains=tuple(pkg.get("constrains") or ()),
                build_number=int(pkg.get("build_number", 0)),
            ),
            directory,
        )
    ours = channels.setdefault(OUR_CHANNEL, root / OUR_CHANNEL)
    kernels = set()
    for r in rendered:
        pin = kernel_pin(r.run_requirements)
        if pin is not None and (pin, r.cell.platform) not in kernels:
            kernels.add((pin, r.cell.platform))
            assemble(
                pinned_kernel_record(r.run_requirements, r.cell.platform, depends=kernel_run_exports(fixture, r)), ours
            )
    for r in rendered:
        assemble(
            PackageSpec(
                name="flash-attn",
                version=r.recipe["package"]["version"],
                build=r.build_string,
                subdir=r.cell.platform,
                depends=tuple(dict.fromkeys([*r.run_requirements, *injected_run_exports(fixture, r)])),
                build_number=int(r.recipe["build"]["number"]),
            ),
            ours,
        )
    for directory in channels.values():
        index(directory)
    return channels
