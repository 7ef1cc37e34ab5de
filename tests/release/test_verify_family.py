"""`faforge verify` asks each family's verify namespace (faforge.release.verify.family.VerifyFamily): a next family
fits with no edit to the generic code. A pure-Python family (one py3-none-any wheel, no local label, an import
gate of its own and no abi gate) is declared here only, and verify_packages reads its wheel, hands it to that
family and records what the family's gates say; the real families own their packages and wheels by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from faforge.errors import FaforgeError
from faforge.families.registry import FAMILIES
from faforge.family import FLASH_ATTN, FLASH_ATTN_3, FLASH_ATTN_4
from faforge.pipwheel.kinds import NO_LABEL, WheelKind
from faforge.pipwheel.writer import WheelSpec, write_wheel
from faforge.release.package import PackageFacts
from faforge.release.verify.family import VerifyFamily, package_owner, wheel_kinds
from faforge.release.verify.gates import Check
from faforge.release.verify.run import verify_packages
from faforge.release.verify.wheel_identity import wheel_package


def _unused_pack(args, work):
    raise AssertionError("verify packs nothing")


PURE = WheelKind(
    kind="pure",
    project="pure-attn",
    label=NO_LABEL,
    usage="SOURCE --out DIR",
    makes="a pure-Python wheel",
    what="the pure-attn wheel",
    source="its sdist",
    options=frozenset(),
    required=(),
    pack=_unused_pack,
    kept="",
)


class PureFamily:
    """A family with no kernels and no compiled code of its own: its wheel's gates are an import alone."""

    wheels = (PURE,)
    gates_help = "a pure wheel's import"

    def __init__(self) -> None:
        self.asked: list[tuple[str, tuple[str, ...]]] = []

    def owns(self, package: PackageFacts) -> bool:
        return False

    def package_gates(self, package, call, *, kernel, users) -> list[Check]:
        raise AssertionError("it makes no conda package here")

    def wheel_gates(self, wheel, call, *, kernel, users) -> list[Check]:
        self.asked.append((wheel.kind, call.gates))
        assert kernel is None and users == ()
        return [Check(g, "passed" if g == "import" else "skipped", f"{g} of {wheel.filename}") for g in call.gates]


class Report:
    """faforge.release.reporter.Reporter, silent."""

    def say(self, message: str) -> None:
        pass

    def step(self, title: str):
        import contextlib  # noqa: PLC0415 (only this fake needs it)

        @contextlib.contextmanager
        def state():
            yield type("State", (), {"failed": False, "skipped": None})()

        return state()


def pure_wheel(folder: Path) -> Path:
    spec = WheelSpec(
        name="pure-attn",
        version="4.0.0",
        python_tags=("py3",),
        abi_tags=("none",),
        platform_tags=("any",),
        files={"pure_attn/__init__.py": b""},
    )
    return write_wheel(spec, folder)


def test_a_pure_python_family_fits_without_a_generic_edit(tmp_path):
    family = PureFamily()
    families: list[VerifyFamily] = [*(f.verify for f in FAMILIES), family]
    wheel = pure_wheel(tmp_path / "dist")
    read = wheel_package(wheel, wheel_kinds(families))
    assert (read.kind, read.cuda, read.cuda_archs, read.kernel_pin) == ("pure", None, None, None)
    entries = verify_packages(
        [str(wheel)],
        ("abi", "import"),
        families=families,
        manifest=tmp_path / "manifest",
        against=None,
        kernel_channel=None,
        report=Report(),
        done=lambda checked: None,
    )
    assert family.asked == [("pure", ("abi", "import"))]
    assert [(e.gate, e.result, e.detail) for e in entries] == [
        ("abi", "skipped", f"abi of {wheel.name}"),
        ("import", "passed", f"import of {wheel.name}"),
    ]


def test_a_wheel_no_family_owns_is_bad_input(tmp_path):
    wheel = pure_wheel(tmp_path)
    with pytest.raises(FaforgeError, match="none of the projects faforge verifies"):
        wheel_package(wheel, wheel_kinds([f.verify for f in FAMILIES]))


def test_each_family_owns_its_packages_and_wheels_by_name():
    families = [f.verify for f in FAMILIES]
    kinds = {k.project: k.kind for k in wheel_kinds(families)}
    assert kinds == {
        FLASH_ATTN.kernel_package: "kernel",
        FLASH_ATTN.package: "glue",
        FLASH_ATTN_3.package: "fa3",
        FLASH_ATTN_4.package: "fa4",
    }

    def named(name: str) -> PackageFacts:
        return PackageFacts(
            path=Path(f"{name}.conda"),
            name=name,
            version="1",
            build="0",
            subdir="linux-64",
            sha256="0" * 64,
            depends=(),
            python=None,
            torch=None,
            cuda=None,
            cxx11_abi=None,
        )

    assert package_owner(families, named(FLASH_ATTN_3.package)) is FAMILIES[1].verify
    assert package_owner(families, named(FLASH_ATTN.kernel_package)) is FAMILIES[0].verify
    assert package_owner(families, named(FLASH_ATTN_4.package)) is FAMILIES[2].verify
