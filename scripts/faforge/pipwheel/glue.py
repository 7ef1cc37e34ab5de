"""The glue wheel: the backend's raw wheel of one pip cell, repacked with its pip identity.

recipes/flash-attn/build_flash_attn.py --kernel-library LIB --wheel-dir DIR, run by a Python whose torch is
the cell's PyPI torch, compiles flash_api.cpp alone and links it against the kernel library by SONAME; its
wheel (setuptools', flash_attn-2.8.3.post2-cp312-cp312-linux_x86_64.whl) says nothing of which torch it
needs. The pip wheel is that wheel with
  - the version's local label naming the torch minor, CUDA and C++ ABI (2.8.3.post2+torch2.11.cu130.abi1)
    and the build tag <build number>h<hash> of the cell's rendered build string,
  - Requires-Dist torch>=2.11,<2.12, libflash-attn-kernels==<the kernel wheel's version> (exact: the glue
    links its launch functions, whose parameters follow the Philox layout) and the raw wheel's other needs
    (einops); Requires-Python of its one CPython,
  - the extension's RUNPATH set for pip's layout (patchelf; its code untouched, faforge.pipwheel.patch),
  - the platform tag faforge.pipwheel.manylinux gives its ELF file.
Before writing, the raw wheel must be what the cell says: its CPython, its C++ ABI (read from its symbols),
no kernel library carried inside, and every kernel symbol it imports exported by the kernel wheel's library.
"""

from __future__ import annotations

import fnmatch
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from faforge.abi.classify import cxx11_abi_of
from faforge.abi.elf import read_dynamic_symbols, read_info
from faforge.errors import EXIT_PROBLEMS, FaforgeError
from faforge.family import FLASH_ATTN
from faforge.pipwheel import layout
from faforge.pipwheel.built import BuiltWheel
from faforge.pipwheel.facts import WheelFacts, dist_info_dir, read_wheel, wheel_contents
from faforge.pipwheel.filename import parse_wheel_filename
from faforge.pipwheel.manylinux import platform_tag
from faforge.pipwheel.patch import set_runpath
from faforge.pipwheel.writer import ELF_MAGIC, WheelSpec, rewrite_wheel

PYTHON = re.compile(r"3\.(?P<minor>[0-9]{1,2})")
KERNEL_WHEEL_CAP = 4 << 30


@dataclass(frozen=True)
class GlueCell:
    """The pip cell a glue wheel is for (faforge.matrix's pip cells carry these; the CLI takes them as options)."""

    torch: str  # its torch minor, 2.11
    cuda: str  # 13.0
    cxx11_abi: int  # 1 for PyPI torch >= 2.7, 0 up to 2.6
    python: str  # 3.12
    build_tag: str  # 0h1a2b3c4, or the cell's flash-attn build string py312_torch2_11_cu130_cxx11abi1_h1a2b3c4_0


def python_tag(python: str) -> str:
    match = PYTHON.fullmatch(python or "")
    if not match:
        raise FaforgeError(
            f"--python {python[:40]!r} is not a CPython 3.X version", hint="pass e.g. 3.12", input=python
        )
    return f"cp3{match['minor']}"


def requires_python(python: str) -> str:
    minor = int(python_tag(python)[3:])
    return f">=3.{minor},<3.{minor + 1}"


def kernel_wheel_facts(kernel_wheel: Path) -> WheelFacts:
    """The facts of a kernel wheel, refused when it is another project's."""
    facts = read_wheel(kernel_wheel)
    if facts.name != canonicalize_name(FLASH_ATTN.kernel_package):
        raise FaforgeError(
            f"--kernel-wheel {kernel_wheel}: a {facts.name} wheel, not {FLASH_ATTN.kernel_package}",
            hint="pass the kernel wheel `faforge wheel kernel` wrote",
            input=str(kernel_wheel),
        )
    return facts


def _kernel_library(kernel_wheel: Path) -> tuple[WheelFacts, bytes]:
    facts = kernel_wheel_facts(kernel_wheel)
    contents = wheel_contents(kernel_wheel, KERNEL_WHEEL_CAP)
    member = f"{layout.KERNEL_DIR}/{FLASH_ATTN.kernel_soname}"
    if member not in contents:
        raise FaforgeError(
            f"--kernel-wheel {kernel_wheel}: holds no {member}",
            hint="pass the kernel wheel `faforge wheel kernel` wrote",
            input=str(kernel_wheel),
        )
    return facts, contents[member]


def repack_glue_wheel(
    raw: Path,
    *,
    cell: GlueCell,
    kernel_wheel: Path,
    out_dir: Path,
    work: Path,
    say: Callable[[str], None] = lambda line: None,
) -> BuiltWheel:
    """Write the pip glue wheel of `cell` from the backend's raw wheel (see the module docstring)."""
    started = time.monotonic()
    raw = Path(raw)
    facts = read_wheel(raw)
    what = raw.name
    if facts.name != canonicalize_name(FLASH_ATTN.package):
        raise FaforgeError(
            f"{raw}: a {facts.name} wheel, not {FLASH_ATTN.package}",
            hint=f"pass the wheel {FLASH_ATTN.build_script} wrote",
            input=str(raw),
        )
    tag = python_tag(cell.python)
    if facts.python_tags != (tag,) or facts.abi_tags != (tag,):
        raise FaforgeError(
            f"{raw}: built for {'.'.join(facts.python_tags)}-{'.'.join(facts.abi_tags)}, not the cell's {tag}-{tag} "
            f"(Python {cell.python})",
            hint="build the glue with the cell's Python, or pass its --python",
            input=str(raw),
        )
    label = layout.glue_label(cell.torch, cell.cuda, cell.cxx11_abi)
    build_tag = layout.glue_build_tag(cell.build_tag)
    kernel, library = _kernel_library(kernel_wheel)
    if Version(kernel.version).public != Version(facts.version).public:
        raise FaforgeError(
            f"--kernel-wheel {kernel_wheel.name}: version {kernel.version}, but the glue is {facts.version}",
            hint="build both from the same sdist",
            input=str(kernel_wheel),
        )
    if not (kernel.local or "").startswith(layout.cuda_tag(cell.cuda) + "."):
        raise FaforgeError(
            f"--kernel-wheel {kernel_wheel.name}: built for {kernel.local}, not CUDA {cell.cuda}",
            hint="pass the kernel wheel of the cell's kernel key",
            input=str(kernel_wheel),
        )
    contents = wheel_contents(raw)
    extension_prefix = f"{FLASH_ATTN.extension}."
    elves = sorted(name for name, data in contents.items() if data.startswith(ELF_MAGIC))
    extensions = [n for n in elves if "/" not in n and n.startswith(extension_prefix) and n.endswith(".so")]
    if elves != extensions or len(extensions) != 1:
        carried = [n for n in elves if n not in extensions]
        why = (
            f"it carries {', '.join(carried)}: a pip glue links the kernel "
            "wheel's library, never a copy (build it with --kernel-library)"
            if carried
            else f"{len(extensions)} {FLASH_ATTN.extension} modules at its top, not one"
        )
        raise FaforgeError(
            f"{raw}: {why}",
            hint=f"pass the wheel of `{FLASH_ATTN.build_script} --kernel-library LIB`",
            input=str(raw),
            exit_code=EXIT_PROBLEMS,
        )
    extension = extensions[0]
    work.mkdir(parents=True, exist_ok=True)
    (work / "raw").mkdir(exist_ok=True)
    original = work / "raw" / extension
    original.write_bytes(contents[extension])
    kernel_copy = work / "raw" / FLASH_ATTN.kernel_soname
    kernel_copy.write_bytes(library)
    _check_links(original, kernel_copy, cell, what)
    runpath = layout.glue_runpath(cell.cuda)
    patched = work / extension
    identity = set_runpath(original, patched, runpath, say=say)
    verdict = platform_tag([patched], what=what)
    raw_info = dist_info_dir(list(contents), parse_wheel_filename(raw.name), str(raw))
    spec = WheelSpec(
        name=facts.name,
        version=f"{facts.version}+{label}",
        build_tag=build_tag,
        python_tags=(tag,),
        abi_tags=(tag,),
        platform_tags=(verdict.tag,),
        requires_python=requires_python(cell.python),
        requires_dist=(
            layout.torch_requirement(cell.torch),
            f"{kernel.name}=={kernel.version}",
            *(r for r in facts.requires_dist if canonicalize_name(Requirement(r).name) not in ("torch", kernel.name)),
        ),
        summary=f"{FLASH_ATTN.title} for torch {cell.torch} (CUDA {cell.cuda}, "
        f"C++ ABI {cell.cxx11_abi}), linking {kernel.filename}",
        files={},
    )
    path = rewrite_wheel(spec, contents, raw_info, member=extension, patched=patched, out_dir=out_dir)
    return BuiltWheel(
        path=path,
        facts=read_wheel(path),
        verdict=verdict,
        runpath=runpath,
        gpu=identity.gpu,
        seconds=time.monotonic() - started,
    )


def is_kernel_symbol(name: str) -> bool:
    """Whether a symbol is one the kernel library exports (FLASH_ATTN.kernel_exports): a C name matching a
    pattern, or a mangled C++ name holding a pattern's identifier (_ZN5flash12run_mha_fwd_I...)."""
    for pattern in FLASH_ATTN.kernel_exports.split(","):
        if fnmatch.fnmatchcase(name, pattern) or (name.startswith("_Z") and pattern.rstrip("*") in name):
            return True
    return False


def _check_links(extension: Path, kernel_library: Path, cell: GlueCell, what: str) -> None:
    """The extension is the cell's: its C++ ABI, and every kernel symbol it imports exported by the kernel library."""
    info = read_info(extension)
    if FLASH_ATTN.kernel_soname not in info.needed:
        raise FaforgeError(
            f"{what}: its {FLASH_ATTN.extension} does not link "
            f"{FLASH_ATTN.kernel_soname} (DT_NEEDED: {', '.join(info.needed)})",
            hint=f"build it with {FLASH_ATTN.build_script} --kernel-library",
            exit_code=EXIT_PROBLEMS,
        )
    symbols = read_dynamic_symbols(extension)
    found = cxx11_abi_of({s.name for s in symbols.all_symbols()})
    if found is not None and found != cell.cxx11_abi:
        raise FaforgeError(
            f"{what}: built with _GLIBCXX_USE_CXX11_ABI={found}, but the cell is abi{cell.cxx11_abi}",
            hint="pass the cell's --cxx11-abi, or rebuild the glue for it",
            exit_code=EXIT_PROBLEMS,
        )
    wanted = {s.name for s in symbols.undefined() if is_kernel_symbol(s.name)}
    exported = set(read_dynamic_symbols(kernel_library).exports())
    missing = sorted(wanted - exported)
    if missing:
        raise FaforgeError(
            f"{what}: imports {len(missing)} kernel symbol(s) the "
            f"kernel wheel's library lacks (e.g. {missing[0][:120]})",
            hint="pass the kernel wheel of the kernel build this glue linked",
            exit_code=EXIT_PROBLEMS,
        )
