"""FA4's known-good set for a GPU machine without a network: `build` here, `install` there.

    python -m faforge.families.flash_attn_4.gpu_payload build [--torch 2.11 --cuda 13.0 --python 3.12]
    python -m faforge.families.flash_attn_4.gpu_payload install --from build/gpu-payload --target DIR
    python -m faforge.families.flash_attn_4.gpu_payload check --from build/gpu-payload
    python -m faforge.families.flash_attn_4.gpu_payload pythonpath DIR

`build` downloads the set's wheels for one CPython and platform with pip (PyPI only: `--isolated`, so no local
find-links or constraints can slip in a file), checks each one's sha256 against PyPI's index (and FA4's against
the data file), and cuts them into parts (faforge.families.flash_attn_4.gpu_payload_parts). Left out: what the GPU
machine's image has already (torch and, by default, triton, einops, packaging, typing-extensions) and
nvidia-cutlass-dsl-libs-cu12: the DSL loads the highest CUDA flavour not newer than the driver, and a CUDA 13
torch means a CUDA 13 driver. `install` puts the parts back together, checks every sha256, installs the wheels
with `pip install --no-index --no-deps --target DIR`, and prints the PYTHONPATH that makes DIR act as a site
folder: DIR, then what its .pth files add (nvidia-cutlass-dsl's puts `cutlass` on the path; a --target folder's
.pth files are not read); `pythonpath` prints it for a folder the wheels were copied into; `check`, a payload
call's command, reports each part carried so far (ok, missing, corrupt: exit 1), so a bad transfer is redone then.
Only `build` needs faforge's dependencies. Reached here, not through `faforge test-gpu`, which has no per-family
hook for a payload.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from faforge.errors import FaforgeError, RemoteError
from faforge.families.flash_attn_4.gpu_payload_parts import part_states, read_manifest, reassemble, sha256_of, split
from faforge.family import FLASH_ATTN_4

# Already in the GPU machine's image (docs/maintaining/gpu-gate.md), so not carried.
IMAGE_HAS = ("triton", "einops", "packaging", "typing-extensions")
LEFT_OUT = {
    "nvidia-cutlass-dsl-libs-cu12": "the DSL loads the highest CUDA flavour not newer than the driver: cu13 here",
}
PART_MIB = 40  # a device call carries 64 MiB with the working tree (about 21 MiB): one part and some margin
SIMPLE = "https://pypi.org/simple/{name}/"
PLATFORMS = {
    "x86_64": ("manylinux_2_28_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"),
    "aarch64": ("manylinux_2_28_aarch64", "manylinux_2_24_aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64"),
}


def requirements(torch: str, cuda: str, image_has: tuple[str, ...]) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """(exact pins of the set's wheels to carry, {left-out package: why}, {FA4's wheel: its sha256 in the data})."""
    from faforge.families.flash_attn_4.sets import load  # noqa: PLC0415 (yaml and packaging: here only)

    data = load()
    kgs = data.set_for(torch, cuda)
    if kgs is None:
        raise FaforgeError(
            f"no known-good set of {FLASH_ATTN_4.package} for torch {torch} and CUDA {cuda}",
            input=f"--torch {torch} --cuda {cuda}",
            hint=f"one of: {', '.join(f'--torch {s.torch} --cuda {s.cuda}' for s in data.sets)}",
        )
    left_out = {**LEFT_OUT, **dict.fromkeys(image_has, "in the GPU machine's image")}
    pins = [f"{FLASH_ATTN_4.package}=={kgs.version}"]
    pins += [f"{name}=={version}" for name, version in kgs.packages.items() if name not in left_out]
    known = {r.wheel: r.sha256 for r in data.releases if r.version == kgs.version}
    return pins, {name: why for name, why in left_out.items() if name in kgs.packages}, known


def index_sha256(filename: str, project: str) -> str | None:
    """PyPI's sha256 of one file (its PEP 691 JSON index), None if the index does not list it."""
    request = urllib.request.Request(
        SIMPLE.format(name=project), headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            files = json.load(response)["files"]
    except (OSError, ValueError, KeyError) as exc:
        raise RemoteError(f"PyPI's index of {project} could not be read ({exc})", input=request.full_url) from None
    return next((f["hashes"].get("sha256") for f in files if f["filename"] == filename), None)


def download(pins: list[str], dest: Path, python: str, arch: str, known: dict[str, str]) -> list[Path]:
    """The wheel of each pin for CPython `python` on manylinux `arch`, from PyPI, each checked against its index
    (and against `known`, {wheel: sha256} from the data file)."""
    platforms = [arg for tag in PLATFORMS[arch] for arg in ("--platform", tag)]
    command = [sys.executable, "-m", "pip", "download", "--isolated", "--disable-pip-version-check", "--quiet"]
    command += ["--no-deps", "--only-binary=:all:", "--implementation", "cp", "--python-version", python]
    command += [*platforms, "-d", str(dest), *pins]
    print("+ " + " ".join(command), file=sys.stderr, flush=True)
    if subprocess.run(command).returncode != 0:
        raise FaforgeError("pip could not download the set's wheels (its message is above)", input=" ".join(pins))
    wheels = []
    for pin in pins:
        name, version = pin.split("==")
        stem = f"{name.replace('-', '_')}-{version}-"
        found = [w for w in dest.glob("*.whl") if w.name.lower().startswith(stem.lower())]
        if len(found) != 1:
            raise FaforgeError(f"expected one wheel of {pin} in {dest}, found {[w.name for w in found]}")
        wheel = found[0]
        want, got = index_sha256(wheel.name, name), sha256_of(wheel)
        for source, expected in (("PyPI's index", want), ("the data file", known.get(wheel.name, got))):
            if got != expected:
                raise FaforgeError(
                    f"{wheel.name} has sha256 {got}; {source} says {expected}",
                    input=str(wheel),
                    hint="delete it and rerun",
                )
        wheels.append(wheel)
    return wheels


def build(args: argparse.Namespace) -> dict:
    pins, left_out, known = requirements(args.torch, args.cuda, tuple(filter(None, args.image_has.split(","))))
    with tempfile.TemporaryDirectory(prefix="fa4-payload-") as scratch:
        dest = Path(args.downloads or scratch)
        dest.mkdir(parents=True, exist_ok=True)
        wheels = download(pins, dest, args.python, args.arch, known)
        about = {
            "package": FLASH_ATTN_4.package,
            "set": f"torch{args.torch}-cu{args.cuda.replace('.', '')}",
            "python": args.python,
            "arch": args.arch,
            "left_out": left_out,
        }
        return split(wheels, args.out, int(args.part_mib * (1 << 20)), about)


def site_path(target: Path, python: str = sys.executable) -> list[str]:
    """`target` and the sys.path entries its .pth files add, as Python's own site machinery computes them."""
    code = (
        "import json, site, sys; before = list(sys.path); site.addsitedir(sys.argv[1]); "
        "print(json.dumps([p for p in sys.path if p not in before]))"
    )
    result = subprocess.run([python, "-c", code, str(target)], capture_output=True, text=True)
    if result.returncode != 0:
        raise FaforgeError(f"reading the .pth files of {target} failed: {result.stderr.strip()[-400:]}")
    return [str(target), *(p for p in json.loads(result.stdout) if p != str(target))]


def install(args: argparse.Namespace) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="fa4-wheels-") as scratch:
        manifest, wheels = reassemble(args.source, Path(scratch))
        print(
            f"payload {manifest['set']} (CPython {manifest['python']}): {len(manifest['parts'])} parts checked, "
            f"{len(wheels)} wheels with their sha256",
            file=sys.stderr,
        )
        command = [args.python, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile", "--quiet"]
        command += ["--disable-pip-version-check", "--target", str(args.target), *map(str, wheels)]
        print("+ " + " ".join(command[: -len(wheels)]) + f" <{len(wheels)} wheels>", file=sys.stderr, flush=True)
        if subprocess.run(command).returncode != 0:
            raise FaforgeError(
                "pip could not install the payload's wheels (its message is above)", input=str(args.source)
            )
    return site_path(args.target, args.python)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faforge.families.flash_attn_4.gpu_payload", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("build", help="here: download, check and cut the set into parts")
    make.add_argument("--torch", default="2.11", help="the set's torch minor (default: the GPU machine's, 2.11)")
    make.add_argument("--cuda", default="13.0")
    make.add_argument("--python", default="3.12", help="the GPU machine's CPython (default 3.12)")
    make.add_argument("--arch", choices=sorted(PLATFORMS), default="x86_64")
    make.add_argument("--image-has", default=",".join(IMAGE_HAS), help="packages not to carry (comma-separated)")
    make.add_argument("--part-mib", type=float, default=PART_MIB, help=f"largest part, MiB (default {PART_MIB})")
    make.add_argument("--downloads", type=Path, help="keep the downloaded wheels there (default: a temporary folder)")
    make.add_argument("--out", type=Path, default=Path("build/gpu-payload"), help="default: build/gpu-payload")
    put = commands.add_parser("install", help="there: check the parts, put the wheels back together, install them")
    put.add_argument("--from", dest="source", type=Path, default=Path("build/gpu-payload"))
    put.add_argument("--target", type=Path, required=True, help="the folder pip installs into")
    put.add_argument("--python", default=sys.executable, help="whose pip installs (default: this Python)")
    check = commands.add_parser("check", help="there, in a payload call: the parts carried so far, each checked")
    check.add_argument("--from", dest="source", type=Path, default=Path("build/gpu-payload"))
    path = commands.add_parser("pythonpath", help="the PYTHONPATH that makes a folder act as a site folder")
    path.add_argument("folder", type=Path, help="e.g. a --target folder the payload was copied into")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            manifest = build(args)
            for part in manifest["parts"]:
                print(f"{args.out}/{part['name']}: {part['size'] / (1 << 20):.1f} MiB")
            total = sum(w["size"] for w in manifest["wheels"])
            print(
                f"{len(manifest['wheels'])} wheels, {total / (1 << 20):.1f} MiB in {len(manifest['parts'])} parts; "
                f"left out: {', '.join(manifest['left_out']) or 'nothing'}"
            )
        elif args.command == "check":
            states = part_states(args.source, read_manifest(args.source))
            print(", ".join(f"{name} {state}" for name, state in states.items()))
            return 1 if "corrupt" in states.values() else 0
        elif args.command == "install":
            print(":".join(install(args)))  # the PYTHONPATH that makes --target a site folder
        else:
            print(":".join(site_path(args.folder)))
    except FaforgeError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
