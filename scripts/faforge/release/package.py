"""What a built package says about itself: name, build string, cell (flash-attn), kernel key
(libflash-attn-kernels) or package id (a package serving a range of torch minors), sha256.

Everything is read from the package file (info/index.json and its bytes), so `verify` and
`publish` judge exactly the file they are given, whatever matrix produced it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from faforge import paths
from faforge.channel.archive import check_payload, read_index_json
from faforge.errors import FaforgeError
from faforge.family import FLASH_ATTN
from faforge.kernels.cachekey import archs_of_tag, archs_tag
from faforge.matrix.kernels import KERNEL_BUILD, KERNEL_PACKAGE, KernelPin, kernel_pin
from faforge.packagefile import PACKAGE_SUFFIXES, sha256_of

# py312_torch2_7_cu129_cxx11abi1_h<hash>_<n>, as recipes/flash-attn/recipe.yaml writes it.
BUILD_STRING = re.compile(
    r"py(?P<py>\d)(?P<pyminor>\d+)_torch(?P<torch>\d+_\d+)_cu(?P<cuda>\d+)_cxx11abi(?P<abi>[01])_h[0-9a-f]+_\d+"
)
# The run requirement that names the exact torch: `pytorch >=2.7.1,<2.8 cuda129*` (conda-forge)
# or `pytorch ==2.5.1 py3*` (legacy pytorch channel).
TORCH_PIN = re.compile(r"^pytorch\s+(?:>=|==)\s*(?P<version>\d+(?:\.\d+)+)")
# cu130_sm80_90a_faforge_h<hash>_<n> (`_trimmed` before the hash: a build with features switched off): a package
# on torch's stable ABI, serving a range of torch minors, names CUDA and GPU code, no python, torch or C++ ABI.
TORCH_RANGE_BUILD = re.compile(r"cu(?P<cuda>\d+)_sm(?P<archs>[0-9a-z_]+?)_faforge(?:_trimmed)?_h[0-9a-f]+_\d+")


def cuda_of_tag(tag: str) -> str:
    """'129' -> '12.9', '130' -> '13.0' (the last digit is the minor, as conda-forge spells it)."""
    return f"{tag[:-1]}.{tag[-1]}"


@dataclass(frozen=True)
class PackageFacts:
    path: Path
    name: str
    version: str
    build: str
    subdir: str
    sha256: str
    depends: tuple[str, ...]
    python: str | None
    torch: str | None
    cuda: str | None
    cxx11_abi: int | None
    cuda_archs: str | None = None  # a kernel or torch-range package's arch list ('80;90;100;120+PTX'), from its build

    @property
    def is_kernel_package(self) -> bool:
        return self.name == KERNEL_PACKAGE

    @property
    def kernel_pin(self) -> KernelPin | None:
        """The exact kernel build a split flash-attn requires (None: it carries its kernels, or is one)."""
        return kernel_pin(self.depends)

    @property
    def filename(self) -> str:
        return self.path.name

    @property
    def torch_minor(self) -> str | None:
        return ".".join(self.torch.split(".")[:2]) if self.torch else None

    @property
    def cell_id(self) -> str | None:
        """The matrix cell id (linux-64/py312/torch2.7/cu129/abi1), when the build string has one."""
        if self.python is None or self.torch is None or self.cuda is None or self.cxx11_abi is None:
            return None
        py = self.python.replace(".", "")
        return f"{self.subdir}/py{py}/torch{self.torch_minor}/cu{self.cuda.replace('.', '')}/abi{self.cxx11_abi}"

    @property
    def package_id(self) -> str | None:
        """A torch-range package's id (linux-64/cu130/sm80_90a, as `faforge matrix` and `faforge plan` name it),
        when its build string has one; its `torch` is then the oldest torch it serves (its run requirement's floor)."""
        if not TORCH_RANGE_BUILD.fullmatch(self.build) or self.cuda is None or self.cuda_archs is None:
            return None
        return f"{self.subdir}/cu{self.cuda.replace('.', '')}/sm{archs_tag(self.cuda_archs)}"


def facts_from_metadata(
    *, path: Path, name: str, version: str, build: str, subdir: str, depends: Sequence[str], sha256: str
) -> PackageFacts:
    """Facts from repodata-like metadata (an index.json or a channel's repodata record)."""
    if name == KERNEL_PACKAGE or TORCH_RANGE_BUILD.fullmatch(build):
        return _torch_free_build_facts(
            path=path, name=name, version=version, build=build, subdir=subdir, depends=depends, sha256=sha256
        )
    match = BUILD_STRING.fullmatch(build)
    torch = next((m["version"] for m in (TORCH_PIN.match(d) for d in depends) if m), None)
    if match and torch is None:
        torch = match["torch"].replace("_", ".")
    return PackageFacts(
        path=path,
        name=name,
        version=version,
        build=build,
        subdir=subdir,
        sha256=sha256,
        depends=tuple(depends),
        python=f"{match['py']}.{match['pyminor']}" if match else None,
        torch=torch,
        cuda=cuda_of_tag(match["cuda"]) if match else None,
        cxx11_abi=int(match["abi"]) if match else None,
    )


def _torch_free_build_facts(
    *, path: Path, name: str, version: str, build: str, subdir: str, depends: Sequence[str], sha256: str
) -> PackageFacts:
    """A kernel package or a torch-range package has no python, torch or C++ ABI in its build string, which names
    CUDA and the arch list. A torch-range package's `torch` is the range's floor (pytorch >=2.9 cuda*)."""
    kernels = name == KERNEL_PACKAGE
    match = (KERNEL_BUILD.match if kernels else TORCH_RANGE_BUILD.fullmatch)(build)
    try:
        archs = archs_of_tag(match["archs"]) if match else None
    except ValueError:
        archs = None
    floor = None if kernels else next((m["version"] for m in (TORCH_PIN.match(d) for d in depends) if m), None)
    return PackageFacts(
        path=path,
        name=name,
        version=version,
        build=build,
        subdir=subdir,
        sha256=sha256,
        depends=tuple(depends),
        python=None,
        torch=floor,
        cxx11_abi=None,
        cuda=cuda_of_tag(match["cuda"]) if match else None,
        cuda_archs=archs,
    )


def read_package(path: str | Path) -> PackageFacts:
    """The facts of a package file, from its own info/index.json (faforge.channel.archive checks the
    archive and the fields; a subdir outside linux-64, linux-aarch64, noarch is refused, exit 2)."""
    path = Path(path)
    paths.require_input_file(
        path, "`faforge build` writes packages to --output-dir/<platform>/ (see its summary); pass those files"
    )
    if not path.is_file() or not path.name.endswith(PACKAGE_SUFFIXES):
        raise FaforgeError(
            f"{path}: not a conda package file",
            hint=f"pass a .conda or .tar.bz2 file, e.g. output/linux-64/{FLASH_ATTN.package}-*.conda",
        )
    index = read_index_json(path)
    check_payload(path)
    return facts_from_metadata(
        path=path,
        name=index["name"],
        version=index["version"],
        build=index["build"],
        subdir=index["subdir"],
        depends=index.get("depends", []),
        sha256=sha256_of(path),
    )
