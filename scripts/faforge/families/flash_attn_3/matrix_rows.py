"""FlashAttention-3's packages: one per (platform, CUDA, arch list), each serving a range of torch minors.

FA3's glue is written against torch's stable C ABI (hopper/flash_api_stable.cpp, TORCH_TARGET_VERSION
2.9) and the limited Python API, so one binary loads beside every torch from min_torch on: nothing in
it varies with the torch minor, the python or the C++ ABI. What does vary is the CUDA runtime it links
(a cu129 build beside a cu130 torch would bring a second CUDA) and its GPU code. So the package set is
the (platform, CUDA) pairs of the conda-forge world's torch builds from min_torch on, and each package
is compiled against the newest torch of its pair (its headers; the target version keeps the binary to
2.9's interface) and serves the torch minors whose builds its CUDA range admits.

Here: the family's section of variants/matrix.yaml and the packages it derives from the release table; the
family's `matrix` namespace (faforge.families.flash_attn_3.matrix) hands them to the matrix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from faforge.datafile import load_yaml
from faforge.errors import DataError
from faforge.family import FLASH_ATTN_3
from faforge.matrix.cells import python_variant
from faforge.matrix.policy import BuildPolicy, RangeRule, pick, rules
from faforge.matrix.releases import ReleaseTable
from faforge.versions import is_version, vtuple

COMMIT_DIGITS = set("0123456789abcdef")


@dataclass(frozen=True)
class Fa3Policy:
    path: Path
    version: str
    git: str
    commit: str
    build_number: int
    world: str
    min_torch: str
    min_cuda: str
    min_python: str  # the limited API's floor (hopper/setup.py: python_requires >=3.10, wheels tagged cp310-abi3)
    cuda_archs: tuple[RangeRule, ...]


@dataclass(frozen=True)
class Fa3Package:
    platform: str
    world: str
    cuda: str
    cuda_archs: str  # '80;90a'
    torch: str  # whose headers it is compiled against: the newest torch of its (platform, CUDA)
    served: tuple[str, ...]  # the torch minors it installs beside, oldest first
    min_torch: str
    # The python it is built with and its floor: the limited API's, or the oldest its headers' torch has above it
    python: str
    host_gcc: str
    c_stdlib_version: str
    channels: tuple[str, ...]

    @property
    def cuda_tag(self) -> str:
        return "cu" + self.cuda.replace(".", "")

    @property
    def archs_tag(self) -> str:
        """'80;90a' -> 'sm80_90a': the build string's name for the GPU code."""
        return "sm" + self.cuda_archs.replace(";", "_").replace("+PTX", "ptx")

    @property
    def id(self) -> str:
        return f"{self.platform}/{self.cuda_tag}/{self.archs_tag}"

    @property
    def build_string_head(self) -> str:
        return f"{self.cuda_tag}_{self.archs_tag}"

    def variant(self) -> dict[str, str]:
        """The variant-config values (all strings) the flash-attn-3 recipe reads."""
        return {
            "python": python_variant(self.python),
            "torch_version": self.torch,
            "fa3_min_torch": self.min_torch,
            "fa3_served_torch": ",".join(self.served),
            "cuda_compiler_version": self.cuda,
            "cuda_archs": self.cuda_archs,
            # FLASH_ATTENTION_DISABLE_* switches: none for a package; a trimmed build (a test's, the GPU
            # canary's) names them, and its build string says `trimmed`
            "fa3_disable": "",
            "c_compiler_version": self.host_gcc,
            "cxx_compiler_version": self.host_gcc,
            "c_stdlib_version": self.c_stdlib_version,
        }

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "package": FLASH_ATTN_3.package,
            "platform": self.platform,
            "cuda": self.cuda,
            "cuda_archs": self.cuda_archs,
            "build_string_head": self.build_string_head,
            "headers_torch": self.torch,
            "served_torch_minors": list(self.served),
            "python": f">={self.python}",
        }

    def rendered_json(self) -> dict:
        return {
            "platform": self.platform,
            "cuda": self.cuda,
            "cuda_archs": self.cuda_archs,
            "served_torch_minors": list(self.served),
        }


def load_fa3_policy(path: Path) -> Fa3Policy:
    raw = load_yaml(path)
    key = FLASH_ATTN_3.key
    section = raw.get(key) if isinstance(raw, dict) else None
    if not isinstance(section, dict):
        raise DataError(path, key, "missing", hint=f"add the {FLASH_ATTN_3.title} section (version, git, commit, ...)")
    for name in ("version", "git", "world"):
        if not isinstance(section.get(name), str) or not section[name].strip():
            raise DataError(path, f"{key}.{name}", f"invalid value {section.get(name)!r}", hint="a non-empty string")
    commit = str(section.get("commit", ""))
    if len(commit) != 40 or set(commit) - COMMIT_DIGITS:
        raise DataError(
            path,
            f"{key}.commit",
            f"invalid value {commit!r}",
            hint="the full 40-digit lowercase commit of the upstream repository",
        )
    if not isinstance(section.get("build_number"), int) or section["build_number"] < 0:
        raise DataError(
            path, f"{key}.build_number", f"invalid value {section.get('build_number')!r}", hint="a non-negative integer"
        )
    for name in ("min_torch", "min_cuda", "min_python"):
        if not isinstance(section.get(name), str) or not is_version(section[name]):
            raise DataError(
                path, f"{key}.{name}", f"invalid value {section.get(name)!r}", hint="a quoted version such as '2.9'"
            )
    return Fa3Policy(
        path=path,
        version=section["version"],
        git=section["git"],
        commit=commit,
        build_number=section["build_number"],
        world=section["world"],
        min_torch=section["min_torch"],
        min_cuda=section["min_cuda"],
        min_python=section["min_python"],
        cuda_archs=rules(path, section, "cuda_archs", "archs", where=f"{key}."),
    )


def _admits(cuda: str, built_with: str) -> bool:
    """Whether a package built with CUDA `built_with` installs beside a torch built with `cuda`: the run
    requirement cuda-version >=built_with,<next major that the recipe's package carries."""
    return vtuple(built_with) <= vtuple(cuda) and vtuple(cuda)[0] == vtuple(built_with)[0]


def fa3_packages(table: ReleaseTable, policy: BuildPolicy, fa3: Fa3Policy) -> list[Fa3Package]:
    """One package per (platform, CUDA) of the world's torch builds from min_torch on; the host compiler
    and sysroot rules are the world's, as for the flash-attn cells."""
    if fa3.world not in table.worlds:
        raise DataError(
            fa3.path,
            f"{FLASH_ATTN_3.key}.world",
            f"unknown torch world {fa3.world!r}",
            hint=f"one of {', '.join(table.worlds)} (variants/releases.yaml)",
        )
    world = table.worlds[fa3.world]
    rows = [
        r
        for r in table.releases
        if r.world == fa3.world
        and vtuple(r.torch_minor) >= vtuple(fa3.min_torch)
        and vtuple(r.cuda) >= vtuple(fa3.min_cuda)
    ]
    packages = []
    for platform, cuda in sorted(
        {(p, r.cuda) for r in rows for p in r.platforms}, key=lambda pc: (pc[0], vtuple(pc[1]))
    ):
        own = [r for r in rows if r.cuda == cuda and platform in r.platforms]
        served = sorted({r.torch_minor for r in rows if platform in r.platforms and _admits(r.cuda, cuda)}, key=vtuple)
        newest = max(own, key=lambda r: vtuple(r.torch))
        # The limited API's floor, unless the newest torch publishes no build for it (torch 2.15 has no
        # cp310): then its oldest python above the floor, which python-abi3 makes the package's floor.
        pythons = sorted((p for p in newest.python if vtuple(p) >= vtuple(fa3.min_python)), key=vtuple)
        if not pythons:
            raise DataError(
                fa3.path,
                f"{FLASH_ATTN_3.key}.min_python",
                f"torch {newest.torch} (CUDA {cuda}, {platform}) has no python "
                f"{fa3.min_python} or newer to compile against (it has {', '.join(newest.python)})",
                hint="lower min_python",
            )
        packages.append(
            Fa3Package(
                platform=platform,
                world=fa3.world,
                cuda=cuda,
                cuda_archs=pick(fa3.path, f"{FLASH_ATTN_3.key}.cuda_archs", fa3.cuda_archs, cuda),
                torch=newest.torch,
                served=tuple(served),
                min_torch=fa3.min_torch,
                python=pythons[0],
                host_gcc=policy.pick("host_gcc", cuda, fa3.world),
                c_stdlib_version=policy.pick("c_stdlib_version", cuda),
                channels=world.channels,
            )
        )
    return packages
