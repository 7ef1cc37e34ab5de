"""A package family (flash-attn 2, flash-attn 3, flash-attn 4) as data: its names are spelled here only.

Everything that tells one family from the next lives in one `Family` row: the recipe, the conda
outputs, the Python modules, the kernel library and its C interface, the section of
variants/matrix.yaml holding its version, and the gates its packages pass. Other modules take the
names from here; tests/test_family_names.py fails on a family name spelled as a literal elsewhere.
Plain Python, no YAML: the recipe ships this file with its checker (faforge_checker/), whose test
environments have only the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# A package's identity inputs: (logical name, file or folder relative to the repository root). The name says what
# the input is for, and stays when the file moves.
Inputs = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Identity:
    """One identity digest of a family's packages (faforge.matrix.inputs): the variant key that carries it into
    the variant files, the recipe output it covers (None: the whole recipe of a one-package family), whether the
    recipe outside `outputs:` (the sdist, version, sources) counts too, and its inputs: what can change its
    object files, then what is packed around them."""

    key: str
    output: str | None
    compile_inputs: Inputs
    pack_inputs: Inputs = ()
    with_top: bool = False


@dataclass(frozen=True)
class Family:
    title: str  # its name in messages ("flash-attn 2")
    key: str  # its section of variants/matrix.yaml and its stage of cell jobs in a plan (the workflows read `<key>-N`)
    package: str  # the conda output users install, and the sdist's PyPI name
    module: str  # the Python package it installs
    extension: str  # the compiled extension module the Python package imports
    kernel_package: str  # the conda output of the torch-free kernel library, one per kernel key
    kernel_library: str  # that library's link name in lib/ (a symlink to kernel_soname)
    kernel_soversion: int  # the N of its SONAME, lib<...>.so.N: raised when its C interface changes incompatibly
    kernel_api_prefix: str  # the prefix of the library's C interface (exports, error handlers)
    recipe_dir: str  # the recipe folder, relative to the repository root
    build_script: str  # the recipe's build script, in recipe_dir
    source_dir: str  # the sdist's C++ sources, relative to its root
    host_source: str  # the one TU a cell's own job compiles (the glue), relative to the sdist's root
    include_dirs: tuple[str, ...]  # the sdist's include folders every TU compiles with, in order
    kernel_glob: str  # the kernel TUs' file names in kernel_source_dir
    gates: tuple[str, ...]  # the CPU gates `faforge verify` runs by default
    # Each conda output's identity inputs besides its variant, as (logical name, file or folder): digested under
    # the logical name (faforge.matrix.inputs), so a move alone changes no build string. The kernel package's
    # come in two parts: kernel_compile_inputs can change its objects, kernel_pack_inputs are packed around them
    # (an edit of those alone repacks from cached objects: faforge.release.plan.reuse). glue_inputs: the glue's
    # backend and checker. tests/matrix/test_inputs.py checks every file the recipe ships is in one of them.
    kernel_compile_inputs: Inputs
    kernel_pack_inputs: Inputs
    glue_inputs: Inputs

    @property
    def kernel_inputs(self) -> Inputs:
        """Everything that enters the kernel package: what compiles its objects, then what packs them."""
        return self.kernel_compile_inputs + self.kernel_pack_inputs

    @property
    def identities(self) -> tuple[Identity, ...]:
        """The kernel package's digest (the flash-attn output reads it too: it links that build), and the glue's."""
        kernel = Identity("kernel_inputs", self.kernel_package, self.kernel_compile_inputs, self.kernel_pack_inputs)
        return (replace(kernel, with_top=True), Identity("glue_inputs", self.package, self.glue_inputs))

    @property
    def kernel_exports(self) -> str:
        """The only names the kernel library may export, as `faforge check-abi --exports` patterns."""
        return f"run_mha_*,{self.kernel_api_prefix}*"

    @property
    def kernel_soname(self) -> str:
        """The kernel library's SONAME and real file: what a linked extension's DT_NEEDED names."""
        return f"{self.kernel_library}.{self.kernel_soversion}"

    def is_kernel_library(self, name: str) -> bool:
        """Whether a DT_NEEDED or file name is the kernel library: its SONAME, any other version of it, or
        the unversioned name of builds before the SONAME was versioned."""
        return name == self.kernel_library or name.startswith(self.kernel_library + ".")

    @property
    def kernel_source_dir(self) -> str:
        """The sdist's folder of kernel TUs, relative to its root."""
        return f"{self.source_dir}/src"

    @property
    def dist_name(self) -> str:
        """The package's name as its sdist and wheel files start with it (flash_attn-2.8.3.tar.gz)."""
        return self.package.replace("-", "_")

    @property
    def imports(self) -> tuple[str, ...]:
        """What the import gate imports, in order: torch first, as users do."""
        return ("torch", self.module, self.extension)

    @property
    def measurement_sections(self) -> tuple[str, ...]:
        """No lists of its own in variants/build-measurements.yaml: its TUs are the file's `samples`."""
        return ()

    @property
    def wheel_projects(self) -> tuple[tuple[str, str], ...]:
        """Its wheels' projects and how the wheel index places each (faforge.pipindex.placement): the kernel
        wheel beside the glue wheels that pin it, a glue wheel in the index its local label names."""
        return ((self.kernel_package, "kernel"), (self.package, "glue"))


FLASH_ATTN = Family(
    title="flash-attn 2",
    key="flash_attn",
    package="flash-attn",
    module="flash_attn",
    extension="flash_attn_2_cuda",
    kernel_package="libflash-attn-kernels",
    kernel_library="libflash_attn_kernels.so",
    kernel_soversion=1,
    kernel_api_prefix="flash_attn_kernels_",
    recipe_dir="recipes/flash-attn",
    build_script="build_flash_attn.py",
    source_dir="csrc/flash_attn",
    host_source="csrc/flash_attn/flash_api.cpp",
    include_dirs=("csrc/flash_attn", "csrc/flash_attn/src", "csrc/cutlass/include"),
    kernel_glob="flash_*_sm80.cu",
    gates=("abi", "import"),
    kernel_compile_inputs=(
        ("build script", "recipes/flash-attn/build_flash_attn.py"),
        ("torch shim", "scripts/faforge/kernels/torch_shim"),
        *(
            (f"backend/{name}.py", f"scripts/faforge/backend/{name}.py")
            for name in (
                "__init__ archs ccache errors flags jobs layout logger ninja options plan sources toolchain"
            ).split()
        ),
        ("faforge", "scripts/faforge/__init__.py"),
        ("family names", "scripts/faforge/family.py"),
        # backend/toolchain.py reads the one machine<->subdir table there (its target triple)
        ("platform table", "scripts/faforge/abi/platforms.py"),
    ),
    kernel_pack_inputs=(
        ("licence of CUTLASS", "recipes/flash-attn/LICENSE_CUTLASS.txt"),
        ("licence of PyTorch", "recipes/flash-attn/LICENSE_PYTORCH.txt"),
        ("backend/postlink.py", "scripts/faforge/backend/postlink.py"),
        ("errors", "scripts/faforge/errors.py"),
        ("checker", "scripts/faforge/abi"),
        ("kernels", "scripts/faforge/kernels/__init__.py"),
        ("torch-free check", "scripts/faforge/kernels/torchfree.py"),
    ),
    glue_inputs=(
        ("backend/glue.py", "scripts/faforge/backend/glue.py"),
        ("backend/foreign.py", "scripts/faforge/backend/foreign.py"),
        ("backend/target_torch.py", "scripts/faforge/backend/target_torch.py"),
        ("gpu gate", "scripts/faforge/gpu"),
        ("bounded reader", "scripts/faforge/untrusted.py"),
        ("kernel TUs", "scripts/faforge/kernels/tus.py"),
    ),
)


@dataclass(frozen=True)
class StableAbiFamily:
    """A family built against torch's stable C ABI: one package per (platform, CUDA, arch list) serves
    every torch minor of a range, so there is no kernel split and no per-torch glue (FlashAttention-3)."""

    title: str
    key: str  # its section of variants/matrix.yaml
    package: str  # the conda output users install
    module: str  # the Python package it installs
    extension: str  # the compiled extension module, inside `module`
    interface_module: str  # upstream's top-level module users import (flash_attn_interface), beside `module`
    config_module: str  # the top-level module the build generates, declaring what it contains (flash_attn_config)
    recipe_dir: str
    build_script: str
    source_dir: str  # the C++ sources, relative to the repository's root
    host_source: str  # the stable-ABI glue TU
    include_dirs: tuple[str, ...]
    gates: tuple[str, ...]
    # Its own lists in variants/build-measurements.yaml (timed builds and TUs), which its cost model reads.
    measurement_sections: tuple[str, ...]
    # What enters the package besides its variant and upstream's commit, as (logical name, path) like a Family's:
    # the files its recipe ships. compile_inputs can change its object files (the build script, the backend,
    # the family's own backend); pack_inputs are packed around them (the checker its test runs). Their digest is
    # the variant key `fa3_inputs`, so the build string follows them (faforge.matrix.inputs;
    # tests/matrix/test_inputs.py); an edit of pack_inputs alone repacks from cached objects.
    compile_inputs: Inputs
    pack_inputs: Inputs
    inputs_key: str  # the variant key that carries their digest

    @property
    def inputs(self) -> Inputs:
        return self.compile_inputs + self.pack_inputs

    @property
    def identities(self) -> tuple[Identity, ...]:
        return (Identity(self.inputs_key, None, self.compile_inputs, self.pack_inputs, with_top=True),)

    @property
    def imports(self) -> tuple[str, ...]:
        """What the import gate imports, in order: torch first, then what upstream's recipe test imports."""
        return ("torch", self.module, self.extension, self.interface_module)

    @property
    def wheel_projects(self) -> tuple[tuple[str, str], ...]:
        """Its one wheel serves a torch range: every index of its CUDA whose torch its requirement admits."""
        return ((self.package, "torch-range"),)


# hopper/setup.py at the pinned commit (variants/matrix.yaml cites it): PACKAGE_NAME flash_attn_3 (L36),
# the extension f"{PACKAGE_NAME}._C" (L693), py_modules flash_attn_interface and flash_attn_config (L824).
FLASH_ATTN_3 = StableAbiFamily(
    title="flash-attn 3",
    key="flash_attn_3",
    package="flash-attn-3",
    module="flash_attn_3",
    extension="flash_attn_3._C",
    interface_module="flash_attn_interface",
    config_module="flash_attn_config",
    recipe_dir="recipes/flash-attn-3",
    build_script="build_flash_attn_3.py",
    source_dir="hopper",
    host_source="hopper/flash_api_stable.cpp",
    include_dirs=("hopper", "csrc/cutlass/include"),
    gates=("abi", "import"),
    measurement_sections=("fa3_builds", "fa3_samples"),
    compile_inputs=(
        ("build script", "recipes/flash-attn-3/build_flash_attn_3.py"),
        ("faforge", "scripts/faforge/__init__.py"),
        ("family names", "scripts/faforge/family.py"),
        ("backend", "scripts/faforge/backend"),
        ("platform table", "scripts/faforge/abi/platforms.py"),
        ("families", "scripts/faforge/families/__init__.py"),
        ("family package", "scripts/faforge/families/flash_attn_3/__init__.py"),
        ("family backend", "scripts/faforge/families/flash_attn_3/backend.py"),
    ),
    pack_inputs=(
        ("errors", "scripts/faforge/errors.py"),
        ("checker", "scripts/faforge/abi"),
    ),
    inputs_key="fa3_inputs",
)


@dataclass(frozen=True)
class PurePythonFamily:
    """One pure-Python wheel that compiles its kernels at run time (FlashAttention-4): nothing is built here. Each
    package is upstream's wheel plus the known-good set (its data file) of one torch minor and CUDA, as conda run
    requirements or wheel metadata; its wheel's label names both (cu130.torch2.11), so the torch-range rule
    places it in the one index of its torch minor."""

    title: str
    key: str  # its section of plans and pages
    package: str  # the conda output and PyPI project users install
    module: str  # what users import
    namespace: str  # the import package it shares with another family (flash_attn), shipping no __init__.py
    recipe_dir: str
    data_file: str  # its releases and known-good sets
    gates: tuple[str, ...]
    pack_inputs: Inputs  # what its packages are made of besides upstream's wheel
    inputs_key: str
    measurement_sections: tuple[str, ...] = ()

    @property
    def identities(self) -> tuple[Identity, ...]:
        return (Identity(self.inputs_key, None, (), self.pack_inputs, with_top=True),)

    @property
    def imports(self) -> tuple[str, ...]:
        return ("torch", self.module)

    @property
    def wheel_projects(self) -> tuple[tuple[str, str], ...]:
        return ((self.package, "torch-range"),)


FLASH_ATTN_4 = PurePythonFamily(
    title="flash-attn 4",
    key="flash_attn_4",
    package="flash-attn-4",
    module="flash_attn.cute",
    namespace="flash_attn",
    recipe_dir="recipes/flash-attn-4",
    data_file="variants/flash-attn-4.yaml",
    gates=("import",),
    pack_inputs=(
        ("known-good sets", "variants/flash-attn-4.yaml"),
        ("sets reader", "scripts/faforge/families/flash_attn_4/sets.py"),
    ),
    inputs_key="fa4_inputs",
)

AnyFamily = Family | StableAbiFamily | PurePythonFamily


def families() -> tuple[AnyFamily, ...]:
    return (FLASH_ATTN, FLASH_ATTN_3, FLASH_ATTN_4)
