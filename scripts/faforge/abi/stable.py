"""The stable-ABI claim of a binary built on torch's stable C ABI: it loads on every torch of a range, not only
on the one whose headers built it.

Torch's "LibTorch Stable ABI" note (https://docs.pytorch.org/docs/2.14/notes/libtorch_stable_abi.html)
names three parts: the stable C headers libtorch implements (torch/csrc/inductor/aoti_torch/c/shim.h,
torch/csrc/stable/c/shim.h: C functions `aoti_torch_*` and `torch_*`), header-only C++ (torch/headeronly)
and inline C++ wrappers over the C functions (torch/csrc/stable). Only the first is linked, so a binary
that keeps the claim imports from torch's libraries nothing but those C names. The claim is then
proven per release, by the loader check (faforge.abi.check) against that release's real libraries:
a C function a newer torch removed, or an older one lacks, is a missing symbol there.
"""

from __future__ import annotations

import argparse
import re
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from faforge.abi import classify
from faforge.abi.check import check_path
from faforge.abi.demangle import demangle
from faforge.abi.elf import read_dynamic_symbols, read_info
from faforge.abi.fatbin import read_gpu_archs
from faforge.abi.gate import default_torch, find_module, parse_archs
from faforge.abi.inputs import package_binaries
from faforge.abi.report import CANNOT_TELL, OK, PROBLEMS, Verdict
from faforge.abi.report_text import render_text
from faforge.abi.resolve import environment_dirs, is_torch_library, load_closure, loaded_by_torch, torch_lib_dirs
from faforge.abi.signature import parse_signature
from faforge.errors import EXIT_OK, EXIT_PROBLEMS, FaforgeError

# The stable C interface's names (shim.h of both folders above).
STABLE_C_NAME = re.compile(r"^(?:aoti_torch_|torch_)[A-Za-z0-9_]+$")
UNSTABLE_IMPORT = "unstable-import"


@dataclass(frozen=True)
class UnstableImport:
    """A torch symbol the binary imports outside the stable C interface: it ties the binary to one torch."""

    module: str
    symbol: str
    demangled: str | None
    library: str | None  # the torch library that provides it in the release checked, when one does


@dataclass(frozen=True)
class StableVerdict:
    extension: str
    unstable: tuple[UnstableImport, ...]
    stable_imports: tuple[str, ...]  # the stable C functions the binary uses
    releases: tuple[Verdict, ...]  # the loader check against each torch release, oldest first as given

    @property
    def verdict(self) -> str:
        kinds = {v.verdict for v in self.releases}
        return PROBLEMS if self.unstable or PROBLEMS in kinds else CANNOT_TELL if CANNOT_TELL in kinds else OK

    @property
    def ok(self) -> bool:
        return self.verdict == OK

    def to_json(self) -> dict:
        return {
            "version": 1,
            "ok": self.ok,
            "verdict": self.verdict,
            "extension": self.extension,
            "unstable_imports": [
                {"module": u.module, "symbol": u.symbol, "demangled": u.demangled, "library": u.library}
                for u in self.unstable
            ],
            "stable_imports": list(self.stable_imports),
            "releases": [
                {"torch": v.torch.version, "against": list(v.against), "ok": v.ok, "report": v.to_json()}
                for v in self.releases
            ],
        }


def check_stable(
    path: str | Path, releases: Sequence[str | Path], *, platform: str | None = None, library_dirs: Sequence[Path] = ()
) -> StableVerdict:
    """Check `path` against each torch in `releases` (one torch each: torch/lib, site-packages or a
    prefix), and that everything it imports from torch is a stable C function."""
    unstable: dict[tuple[str, str], UnstableImport] = {}
    stable: set[str] = set()
    verdicts = []
    for release in releases:
        verdict = check_path(path, [release], platform=platform, library_dirs=library_dirs)
        verdicts.append(verdict)
        search_dirs = environment_dirs(tuple(dict.fromkeys(torch_lib_dirs(release))))
        with package_binaries(path, verdict.torch) as found:
            for binary in found.binaries:
                for item in _torch_imports(binary.path, search_dirs, binary.shown):
                    if isinstance(item, str):
                        stable.add(item)
                    else:
                        unstable.setdefault((item.module, item.symbol), item)
    return StableVerdict(str(path), tuple(unstable.values()), tuple(sorted(stable)), tuple(verdicts))


def _torch_imports(module: Path, search_dirs: Sequence[Path], shown: str) -> list[str | UnstableImport]:
    """Each import of `module` that names torch: a stable C function's name, or an UnstableImport.
    An import names torch when a torch library provides it in this load, or when its mangled name
    lies in torch's namespaces (c10::, at::, torch::, caffe2::) whether or not one provides it."""
    info = read_info(module)
    imports = [s for s in read_dynamic_symbols(module).undefined() if not s.weak]
    torch_load = loaded_by_torch(search_dirs)
    closure = load_closure(info, search_dirs, torch_load.libraries)
    providers = closure.providers([(s.name, s.version) for s in imports])
    found: list[str | UnstableImport] = []
    for sym, provider in zip(imports, providers, strict=True):
        from_torch = provider is not None and is_torch_library(provider.name)
        demangled = demangle(sym.name)
        if not (from_torch or classify.is_torch_mangled(sym.name)) or _is_cxx_runtime(demangled):
            continue
        if STABLE_C_NAME.match(sym.name):
            found.append(sym.name)
        else:
            found.append(UnstableImport(shown, sym.name, demangled, provider.name if provider else None))
    return found


def _is_cxx_runtime(demangled: str | None) -> bool:
    """std:: names are libstdc++'s. torch's libraries re-export some (std::string members), and an
    unversioned reference the static linker met there first binds to them in a torch load; without
    that torch it binds to libstdc++'s, so it does not tie the binary to torch."""
    return demangled is not None and parse_signature(demangled).qualified_name.startswith("std::")


def render_stable_text(verdict: StableVerdict) -> list[str]:
    lines = [f"{verdict.extension}: imports {len(verdict.stable_imports)} of torch's stable C functions"]
    for u in verdict.unstable:
        where = f" (from {u.library})" if u.library else ""
        lines.append(
            f"  {UNSTABLE_IMPORT}: {u.demangled or u.symbol}{where}: not part of torch's stable C interface, "
            "so the binary is tied to the torch it was built against"
        )
    for release in verdict.releases:
        lines += ["", *render_text(release)]
    served = ", ".join(v.torch.version or "?" for v in verdict.releases if v.ok)
    if verdict.ok:
        lines.append(f"OK: stable ABI, loads on every torch checked ({served})")
    else:
        failed = ", ".join(v.torch.version or "?" for v in verdict.releases if not v.ok)
        why = [f"{len(verdict.unstable)} unstable imports"] if verdict.unstable else []
        why += [f"does not load on {failed}"] if failed else []
        lines.append(f"FAILED: not stable-ABI: {'; '.join(why)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    """A recipe's stable-ABI gate in the package's own test environment (the package names its extension):

        python -m faforge.abi.stable --module PACKAGE/_C --expect-archs "80;90a" --served "2.10,2.11,2.12,2.13"

    Finds the installed extension as faforge.abi.gate does, checks it against this environment's torch
    (one release of the range the package serves) and that its GPU code is the declared arch list.
    Exit status: 0 passed, 1 problems, 2 bad input. Standard library and pyelftools only."""
    parser = argparse.ArgumentParser(
        prog="python -m faforge.abi.stable", description="the stable-ABI gate of an installed package"
    )
    parser.add_argument(
        "--module",
        required=True,
        help="the extension's path under site-packages without the suffix, e.g. PACKAGE/_C",
    )
    parser.add_argument("--expect-archs", required=True)
    parser.add_argument(
        "--served", required=True, help="the torch minors the package claims, comma-separated (its variant's)"
    )
    args = parser.parse_args(argv)
    search = [sysconfig.get_paths()["platlib"], sysconfig.get_paths()["purelib"], *sys.path]
    try:
        sass, ptx = parse_archs(args.expect_archs)
        module = find_module(args.module, search)
        verdict = check_stable(module, [default_torch(search)])
        archs = read_gpu_archs(module)
    except FaforgeError as exc:
        print(f"faforge.abi.stable: error: {exc}", file=sys.stderr)
        return exc.exit_code
    print("\n".join(render_stable_text(verdict)))
    here = verdict.releases[0].torch.version or "?"
    print(f"serves torch {args.served.replace(',', ', ')}; checked here against torch {here}")
    mismatch = (set(archs.sass), set(archs.ptx)) != (set(sass), set(ptx))
    if mismatch:
        print(
            f"declaration mismatch: declared SASS {', '.join(sass)} PTX {', '.join(ptx) or 'none'}, the binary has "
            f"SASS {', '.join(archs.sass) or 'none'} PTX {', '.join(archs.ptx) or 'none'}"
        )
    passed = verdict.ok and not mismatch
    print(f"stable-ABI gate {'passed' if passed else 'FAILED'}: {module.name}")
    return EXIT_OK if passed else EXIT_PROBLEMS


if __name__ == "__main__":
    raise SystemExit(main())
