"""`faforge doctor` on real conda prefixes installed by py-rattler from stand-in channels.

The channels hold packages with the real names, versions, build strings and dependencies of conda-forge,
the legacy `pytorch` channel and our own flash-attn cells (run requirements from the real render); the
pytorch packages carry a small torch whose libc10*.so are compiled here with the symbols of that torch.
Each fix doctor prints is solved again against the same channels, so the spec must select the cell.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest

from faforge.channel import local
from faforge.doctor.offers import Offer
from faforge.doctor.torch_symbols_file import default_table
from faforge.versions import next_minor, vtuple
from tests.doctor import envs

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("g++") is None, reason="g++ builds the stand-in torch libraries"),
    # faforge.channel.local.install passes py-rattler 0.28's deprecated `Platform`; not this suite's to fix.
    pytest.mark.filterwarnings("ignore:`Platform` is deprecated:DeprecationWarning"),
]

SEED_002_SYMBOL = "_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"
SET_DEVICE_SUFFIX = {"Ei": "int", "Ea": "char", "Eab": "char_bool"}


def set_device_form(torch: str) -> str:
    """Which SetDevice spelling a torch release exports, from variants/torch_symbols.yaml."""
    function = next(f for f in default_table().functions if f.function == "c10::cuda::SetDevice")
    form = next(f for f in function.forms if f.exported_by(torch))
    return SET_DEVICE_SUFFIX[form.symbol.rsplit("SetDevice", 1)[1]]


def pick(offers: list[Offer], world: str, prefer: tuple[str, str]) -> Offer:
    candidates = [
        o for o in offers if o.cell.platform == "linux-64" and o.cell.python == "3.11" and o.cell.world == world
    ]
    if not candidates:
        pytest.skip(f"the matrix has no linux-64 py3.11 cell in the {world} world")
    return next((o for o in candidates if (o.cell.torch_minor, o.cell.cuda) == prefer), candidates[-1])


@pytest.fixture(scope="module")
def python311():
    found = envs.pyenv_python("3.11")
    if found is None:
        pytest.skip("pyenv has no Python 3.11 here")
    return found


def solve_fix(command: str, channel_root: Path) -> dict:
    """Solve a printed `conda install ... -c CH ... SPEC...` against the stand-in channels of the same names."""
    args = shlex.split(command)
    channels, specs, i = [], [], 2
    while i < len(args):
        if args[i] in ("-c", "-p"):
            if args[i] == "-c" and (channel_root / args[i + 1]).is_dir():
                channels.append((channel_root / args[i + 1]).as_uri())
            i += 2
            continue
        if not args[i].startswith("-"):
            specs.append(args[i])
        i += 1
    return local.solve(channels, specs, "linux-64")


def add_extension(python: Path, tmp_path: Path, parts, args) -> Path:
    built = envs.extension(tmp_path / "ext" / f"{envs.EXTENSION}.cpython-311-x86_64-linux-gnu.so", python, parts, args)
    target = envs.site_packages(python) / built.name
    shutil.copy2(built, target)
    return target


def conda_forge_env(offer: Offer, base_python: Path, tmp_path: Path, specs: list[str]) -> tuple[Path, Path]:
    """A conda-forge-world prefix solved from stand-in conda-forge and faforge channels: (channels folder, python)."""
    channels = tmp_path / "channels"
    python = envs.conda_prefix(
        tmp_path / "env",
        channels,
        {
            "faforge": envs.faforge_packages(offer),
            "conda-forge": envs.conda_forge_torch(offer.cell.torch, offer.cell.cuda),
        },
        specs,
        base_python,
    )
    return channels, python


def pip_install_torch(python: Path, torch: str, tmp_path: Path, libs: Path | None = None) -> None:
    """`pip install torch==X` as it lands over a conda torch: a wheel with the torch package (and its libraries)."""
    files = {
        **envs.torch_modules(torch, "12.8", 1),
        **{f"torch/lib/{lib.name}": lib.read_bytes() for lib in (sorted(libs.glob("*.so")) if libs else ())},
    }
    envs.pip_install(python, str(envs.wheel(tmp_path / "wheels", "torch", torch, files)))


def test_conda_forge_env_without_the_cuda_runtime(run_doctor, offers, python311, builds, tmp_path):
    offer = pick(offers, "conda-forge", ("2.7", "12.9"))
    cell, major = offer.cell, offer.cell.cuda.split(".")[0]
    _, python = conda_forge_env(offer, python311, tmp_path, [offer.spec])
    torch_lib = envs.standin_c10(
        envs.site_packages(python) / "torch" / "lib", cxx11_abi=1, set_device=set_device_form(cell.torch)
    )
    cudart = envs.standin_cudart(builds / f"cudart{major}", int(major)).parent
    form = set_device_form(cell.torch)
    add_extension(
        python,
        tmp_path,
        [envs.SET_DEVICE[form], envs.CUDART],
        (f"-L{torch_lib}", "-lc10_cuda", f"-L{cudart}", f"-l:libcudart.so.{major}"),
    )

    result = run_doctor("--python", python)
    assert result.code == 1
    facts = result.report["facts"]
    assert facts["flash_attn"]["how"] == "conda" and facts["flash_attn"]["conda"]["build"] == offer.build_string
    assert facts["flash_attn"]["claim"]["torch_minor"] == cell.torch_minor
    assert facts["torch"]["conda"]["channel"] == "conda-forge"
    assert f"libcudart.so.{major}: cannot open shared object file" in facts["import"]["error"]["message"]
    assert result.kinds() == ["libcudart-missing"]
    fix = result.fix("conda-install")
    assert fix["commands"] == [
        f"conda install -p {tmp_path / 'env'} -c conda-forge cuda-cudart 'cuda-version =={cell.cuda}'"
    ]


def test_legacy_pytorch_channel_with_an_abi1_wheel(run_doctor, offers, python311, builds, tmp_path):
    """Seed report 002's error, reached the nasty way: the user picked upstream's cxx11abiFALSE wheel for their
    `-c pytorch` torch (ABI 0), as the name promises, but the wheel holds an ABI-1 binary (upstream's
    FLASH_ATTENTION_FORCE_CXX11_ABI=FALSE did not force ABI 0)."""
    offer = pick(offers, "pytorch", ("2.5", "12.1"))
    cell = offer.cell
    channels = tmp_path / "channels"
    python = envs.conda_prefix(
        tmp_path / "env",
        channels,
        {
            "faforge": envs.faforge_packages(offer),
            "pytorch": envs.legacy_pytorch(cell.torch, cell.cuda),
            "conda-forge": envs.conda_forge_base(cell.cuda),
        },
        ["pytorch", "python 3.11.*"],
        python311,
    )
    form = set_device_form(cell.torch)
    envs.standin_c10(envs.site_packages(python) / "torch" / "lib", cxx11_abi=0, set_device=form)
    abi1 = envs.standin_c10(builds / f"c10-abi1-{form}", cxx11_abi=1, set_device=form)
    ext = envs.extension(
        tmp_path / "ext" / f"{envs.EXTENSION}.cpython-311-x86_64-linux-gnu.so",
        python,
        [envs.SET_DEVICE[form], envs.C10_ERROR],
        (f"-L{abi1}", "-lc10", "-lc10_cuda"),
    )
    version = f"2.7.1.post4+cu12torch{cell.torch_minor}cxx11abiFALSE"
    envs.pip_install(
        python,
        str(
            envs.wheel(
                tmp_path / "wheels", "flash_attn", version, {"flash_attn/__init__.py": "", ext.name: ext.read_bytes()}
            )
        ),
    )

    result = run_doctor("--python", python)
    assert result.code == 1
    assert result.report["facts"]["import"]["error"]["message"].endswith(f"undefined symbol: {SEED_002_SYMBOL}")
    assert result.kinds() == ["cxx11-abi-mismatch"]
    assert result.problem("cxx11-abi-mismatch")["message"] == (
        f"flash-attn was built with the C++11 ABI (_GLIBCXX_USE_CXX11_ABI=1); your torch {cell.torch} uses the "
        "pre-C++11 ABI (_GLIBCXX_USE_CXX11_ABI=0)"
    )
    assert any(
        "claims cxx11abi FALSE, but the binary says otherwise" in d
        for d in result.problem("cxx11-abi-mismatch")["details"]
    )
    fix = result.fix("conda-install")
    assert fix["cell"] == cell.id and fix["build_string"] == offer.build_glob
    uninstall, install = fix["commands"]
    assert uninstall.endswith("-m pip uninstall -y flash-attn")
    assert install.startswith(f"conda install -p {tmp_path / 'env'} -c faforge -c pytorch -c nvidia -c conda-forge")
    assert str(solve_fix(install, channels)["flash-attn"].build) == offer.build_string
    assert f"  - {offer.spec}" in fix["environment_yml"] and "  - pytorch-mutex * cuda" in fix["environment_yml"]


def test_pip_torch_over_conda_torch(run_doctor, offers, python311, tmp_path):
    offer = pick(offers, "conda-forge", ("2.7", "12.9"))
    cell = offer.cell
    channels, python = conda_forge_env(offer, python311, tmp_path, ["pytorch", "python 3.11.*"])
    pip_torch = next_minor(cell.torch) + ".0"  # what `pip install torch==2.8.0` over conda's 2.7.1 leaves behind
    pip_install_torch(python, pip_torch, tmp_path)

    result = run_doctor("--python", python)
    assert result.code == 1
    assert result.kinds() == ["mixed-conda-pip-torch", "flash-attn-missing"]
    torch = result.report["facts"]["torch"]
    assert (torch["how"], torch["version"], torch["conda"]["version"]) == ("pip", pip_torch, cell.torch)
    assert result.problem("mixed-conda-pip-torch")["message"].startswith(
        f"torch {pip_torch} from pip shadows conda's pytorch {cell.torch} "
        f"(cuda{cell.cuda.replace('.', '')}_mkl_py311_hstandin_300)"
    )
    pip = result.fix("pip")
    assert pip["commands"][0].endswith("-m pip uninstall -y torch")
    assert "--force-reinstall -c conda-forge" in pip["commands"][1]
    assert str(solve_fix(pip["commands"][1], channels)["pytorch"].version) == cell.torch
    install = result.fix("conda-install")
    assert install["cell"] == cell.id
    assert str(solve_fix(install["commands"][-1], channels)["flash-attn"].build) == offer.build_string


def test_mixed_pytorch_and_conda_forge_channels(run_doctor, offers, python311, tmp_path):
    legacy = pick(offers, "pytorch", ("2.5", "12.1"))
    modern = pick(offers, "conda-forge", ("2.7", "12.9"))
    channels = tmp_path / "channels"
    python = envs.conda_prefix(
        tmp_path / "env",
        channels,
        {
            "conda-forge": envs.conda_forge_torch(modern.cell.torch, modern.cell.cuda),
            "pytorch": envs.legacy_pytorch(legacy.cell.torch, legacy.cell.cuda),
        },
        [f"pytorch =={legacy.cell.torch}", f"libtorch =={modern.cell.torch}", "python 3.11.*"],
        python311,
        strict=False,
    )

    result = run_doctor("--python", python)
    assert result.code == 1
    assert result.kinds() == ["mixed-channels", "flash-attn-missing"]
    assert result.problem("mixed-channels")["evidence"]["worlds"] == {
        "conda-forge": ["libtorch"],
        "pytorch": ["pytorch", "pytorch-cuda", "pytorch-mutex"],
    }
    fix = result.fix("conda-environment")
    assert fix["cell"] == legacy.cell.id
    assert fix["environment_yml"].startswith(
        "name: flash-attn\nchannels:\n  - faforge\n  - pytorch\n  - nvidia\n  - conda-forge\n"
    )


def test_pip_torch_and_an_old_pip_wheel_over_conda(run_doctor, offers, python311, builds, tmp_path):
    """The worst of the seed reports at once: a conda-forge environment where `pip install torch` replaced
    conda's torch, and an upstream flash-attn wheel for torch 2.2 / pre-C++11 ABI was pip-installed on top."""
    offer = pick(offers, "conda-forge", ("2.7", "12.9"))
    cell = offer.cell
    channels, python = conda_forge_env(offer, python311, tmp_path, ["pytorch", "python 3.11.*"])
    pip_torch = next_minor(cell.torch) + ".0"
    libs = envs.standin_c10(builds / f"c10-abi1-{pip_torch}", cxx11_abi=1, set_device=set_device_form(pip_torch))
    pip_install_torch(python, pip_torch, tmp_path, libs)
    old = envs.standin_c10(builds / "c10-abi0-2.2", cxx11_abi=0, set_device="int")
    ext = envs.extension(
        tmp_path / "ext" / f"{envs.EXTENSION}.cpython-311-x86_64-linux-gnu.so",
        python,
        [envs.SET_DEVICE["int"], envs.C10_ERROR],
        ("-D_GLIBCXX_USE_CXX11_ABI=0", f"-L{old}", "-lc10", "-lc10_cuda"),
    )
    envs.install_flash_attn(python, ext, tmp_path, "2.5.8+cu122torch2.2cxx11abiFALSE")

    result = run_doctor("--python", python)
    assert result.code == 1
    assert result.kinds() == ["mixed-conda-pip-torch", "cxx11-abi-mismatch", "signature-drift"]
    assert result.problem("signature-drift")["message"] == (
        f"this flash-attn was built for torch 2.1-2.2 (it imports c10::cuda::SetDevice(int)); your torch {pip_torch} "
        "exports c10::cuda::SetDevice(signed char, bool)"
    )
    remove_torch, install = result.report["fixes"]
    assert remove_torch["kind"] == "pip" and remove_torch["commands"][0].endswith("-m pip uninstall -y torch")
    assert install["kind"] == "conda-install" and install["cell"] == cell.id
    assert install["commands"][0].endswith("-m pip uninstall -y flash-attn")
    assert str(solve_fix(install["commands"][1], channels)["flash-attn"].build) == offer.build_string


def test_conda_torch_without_a_cell(run_doctor, offers, python311, builds, tmp_path):
    """A conda-forge torch newer than the matrix: doctor says why no cell exists, names the closest ones and
    gives the local build against this torch."""
    newest = max((o.cell.torch for o in offers if o.cell.world == "conda-forge"), key=vtuple)
    torch = next_minor(newest) + ".0"
    python = envs.conda_prefix(
        tmp_path / "env",
        tmp_path / "channels",
        {"conda-forge": envs.conda_forge_torch(torch, "13.0")},
        ["pytorch", "python 3.11.*"],
        python311,
    )
    envs.standin_c10(envs.site_packages(python) / "torch" / "lib", cxx11_abi=1, set_device="char_bool")
    old = envs.standin_c10(builds / "c10-abi1-int", cxx11_abi=1, set_device="int")
    ext = envs.extension(
        tmp_path / "ext" / f"{envs.EXTENSION}.cpython-311-x86_64-linux-gnu.so",
        python,
        [envs.SET_DEVICE["int"]],
        (f"-L{old}", "-lc10_cuda"),
    )
    envs.install_flash_attn(python, ext, tmp_path)

    result = run_doctor("--python", python)
    assert result.code == 1
    assert result.kinds() == ["signature-drift"]
    missing = result.fix("no-matching-cell")
    assert missing["title"].startswith(
        f"faforge has no build for this environment (linux-64/py311/torch{next_minor(newest)}/cu130/abi1: "
    )
    assert len(missing["notes"]) == 3 and all(n.startswith("closest: linux-64/py311/") for n in missing["notes"])
    build = result.fix("local-build")
    assert build["commands"][0].endswith("-m pip uninstall -y flash-attn")
    assert any("build_flash_attn.py" in c for c in build["commands"])
