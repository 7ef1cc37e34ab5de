"""Does a kernel TU depend on the torch minor?  Preprocessed sources and object code, compared.

`python -m faforge.bench.torch_preprocess_diff preprocess ...` runs the preprocessor passes nvcc runs
(host, and device per arch; taken from `nvcc --dryrun --keep`) against two torch include dirs
and counts what differs; `... objects A.o B.o` compares two compiled kernel objects: their SASS
(cuobjdump -sass), their cubins (cuobjdump -xelf) and the symbols their host code needs.
cuobjdump and the nvdisasm it runs come from PyPI (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm); the CUDA
toolkit here ships neither.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from faforge.buildcost.measure import CompileSpec, nvcc_command
from faforge.errors import FaforgeError

_MARKER = re.compile(r'^# \d+ "([^"]*)"')


def find_tool(name: str) -> str:
    """A CUDA binary tool: on PATH, or inside an installed nvidia-* PyPI wheel (nvidia/cu*/bin)."""
    found = shutil.which(name)
    if found:
        return found
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for candidate in sorted(Path(root).glob(f"*/bin/{name}")):
            return str(candidate)
    raise FaforgeError(f"{name} not found", hint=f"pip install nvidia-cuda-{name}")


def preprocess(nvcc: str, source: Path, include_dirs: list[str], spec: CompileSpec, keep_dir: Path) -> dict[str, Path]:
    """{'host': .cpp4.ii, 'device': .cpp1.ii} exactly as nvcc would preprocess `source`."""
    keep_dir.mkdir(parents=True, exist_ok=True)
    cmd = nvcc_command(
        [nvcc, "--dryrun", "--keep", "--keep-dir", str(keep_dir)], source, keep_dir / "x.o", include_dirs, spec
    )
    lines = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr.splitlines()
    outputs = {}
    for line in lines:
        command = line.removeprefix("#$ ")
        if line.startswith("#$ ") and " -E " in command and ".ii" in command:
            subprocess.run(["bash", "-c", command], check=True, capture_output=True)
            out = Path(shlex.split(command)[shlex.split(command).index("-o") + 1])
            outputs["device" if "-D__CUDA_ARCH__=" in command else "host"] = out
    if set(outputs) != {"host", "device"}:
        raise FaforgeError(
            f"nvcc --dryrun for {source.name} showed no host and device preprocessing", hint=" ".join(cmd)
        )
    return outputs


@dataclass(frozen=True)
class SourceDiff:
    lines_a: int
    lines_b: int
    removed: int
    added: int
    torch_headers_a: int
    torch_headers_b: int

    @property
    def changed_fraction(self) -> float:
        return (self.removed + self.added) / max(1, self.lines_a + self.lines_b)


def split_preprocessed(text: str) -> tuple[list[str], list[str]]:
    """(code lines without line markers and blank lines, files named by the line markers)."""
    code, files = [], []
    for line in text.splitlines():
        match = _MARKER.match(line)
        if match:
            if match.group(1) not in files:
                files.append(match.group(1))
        elif line.strip():
            code.append(line)
    return code, files


def torch_headers(files: list[str]) -> list[str]:
    return sorted({f.split("/torch/include/", 1)[1] for f in files if "/torch/include/" in f})


def count_diff(a: list[str], b: list[str]) -> tuple[int, int]:
    with tempfile.TemporaryDirectory() as tmp:
        pa, pb = Path(tmp, "a"), Path(tmp, "b")
        pa.write_text("\n".join(a) + "\n")
        pb.write_text("\n".join(b) + "\n")
        out = subprocess.run(["diff", str(pa), str(pb)], capture_output=True, text=True).stdout.splitlines()
    return sum(1 for line in out if line.startswith("< ")), sum(1 for line in out if line.startswith("> "))


def source_diff(text_a: str, text_b: str) -> SourceDiff:
    code_a, files_a = split_preprocessed(text_a)
    code_b, files_b = split_preprocessed(text_b)
    removed, added = count_diff(code_a, code_b)
    return SourceDiff(
        lines_a=len(code_a),
        lines_b=len(code_b),
        removed=removed,
        added=added,
        torch_headers_a=len(torch_headers(files_a)),
        torch_headers_b=len(torch_headers(files_b)),
    )


# What cuobjdump prints around each cubin of an object's fatbin, and not for a bare .cubin.
_CONTAINER = re.compile(r"^(=+|arch = \S+|code version = .*|host = \S+|compile_size = \S+)$")


def sass_lines(cuobjdump_output: str, name: str) -> list[str]:
    """Instructions and kernel names only: no blank lines, no fatbin container header, no file name."""
    return [
        line
        for line in cuobjdump_output.splitlines()
        if line.strip() and "Fatbin" not in line and name not in line and not _CONTAINER.match(line)
    ]


def cuobjdump(*args: str, cwd: str | None = None) -> str:
    """cuobjdump's output; -sass runs nvdisasm, which it finds only on PATH, so the one found is put there."""
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(find_tool("nvdisasm")).parent), os.environ.get("PATH", "")]))
    result = subprocess.run([find_tool("cuobjdump"), *args], capture_output=True, text=True, cwd=cwd, env=env)
    if result.returncode != 0:
        raise FaforgeError(
            f"cuobjdump {' '.join(args)} failed: {(result.stderr or result.stdout).strip()}", input=args[-1]
        )
    return result.stdout


def sass(obj: Path) -> list[str]:
    """SASS of every kernel in `obj` (an object file or a .cubin)."""
    return sass_lines(cuobjdump("-sass", str(obj)), obj.name)


def cubin_digests(obj: Path) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        cuobjdump("-xelf", "all", str(obj.resolve()), cwd=tmp)
        return sorted(hashlib.sha256(p.read_bytes()).hexdigest()[:16] for p in Path(tmp).glob("*.cubin"))


def undefined_symbols(obj: Path) -> list[str]:
    out = subprocess.run(["nm", "-u", "-C", str(obj)], capture_output=True, text=True, check=True).stdout
    return sorted(line.split(None, 1)[1] for line in out.splitlines() if line.strip())


@dataclass(frozen=True)
class ObjectDiff:
    sass_lines_a: int
    sass_lines_b: int
    sass_removed: int
    sass_added: int
    cubins_equal: bool
    kernels: int
    torch_symbols_a: list[str]
    torch_symbols_b: list[str]
    objects_equal: bool


def object_diff(a: Path, b: Path) -> ObjectDiff:
    sa, sb = sass(a), sass(b)
    removed, added = count_diff(sa, sb)

    def torch_refs(obj):
        return [s for s in undefined_symbols(obj) if s.startswith(("c10::", "at::", "torch::"))]

    return ObjectDiff(
        sass_lines_a=len(sa),
        sass_lines_b=len(sb),
        sass_removed=removed,
        sass_added=added,
        cubins_equal=cubin_digests(a) == cubin_digests(b),
        kernels=sum(1 for line in sa if "Function :" in line),
        torch_symbols_a=torch_refs(a),
        torch_symbols_b=torch_refs(b),
        objects_equal=a.read_bytes() == b.read_bytes(),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m faforge.bench.torch_preprocess_diff", description=__doc__.split("\n\n")[0]
    )
    sub = parser.add_subparsers(dest="what", required=True)
    objects = sub.add_parser("objects", help="compare two compiled kernel objects")
    objects.add_argument("a", type=Path)
    objects.add_argument("b", type=Path)
    pre = sub.add_parser("preprocessed", help="compare two preprocessed sources (.ii)")
    pre.add_argument("a", type=Path)
    pre.add_argument("b", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.what == "objects":
            print(object_diff(args.a, args.b))
        else:
            print(source_diff(args.a.read_text(), args.b.read_text()))
    except FaforgeError as exc:
        print(f"torchdiff: error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
