"""Which FlashAttention-3 TU a CUDA kernel comes from, read from its demangled name.

The GPU suite names the kernels torch.profiler saw; the gate names the kernels a binary registers
(their mangled names are strings in the host code, demangled through libstdc++). Both map to TUs here,
so "every TU the package declares was launched" and "every declared TU is in the binary" are checks.

The template parameter lists are those of hopper/ at the commit variants/matrix.yaml pins
(0251105a): CollectiveMainloopFwdSm90 (mainloop_fwd_sm90_tma_gmma_ws.hpp L31-L33), ...FwdSm80
(mainloop_fwd_sm80.hpp L26-L28), ...BwdSm90 (mainloop_bwd_sm90_tma_gmma_ws.hpp L30-L34), ...BwdSm80
(mainloop_bwd_sm80.hpp L24-L28). A forward TU instantiates run_mha_fwd_<Arch, T, kHeadDim, kHeadDimV,
Split, PagedKVNonTMA, Has_softcap, PackGQA>, whose flags reach the mainloop unchanged
(flash_fwd_launch_template.h L201-L219); the TU's name carries them as in faforge.families.flash_attn_3.backend.sources.
Standard library only (plus faforge.abi.demangle, itself ctypes): the suite runs in bare test envs.
"""

from __future__ import annotations

import mmap
import re
from pathlib import Path
from typing import TypedDict


class _Mainloop(TypedDict, total=False):
    """A mainloop's kind and arch, and where its arguments sit (the backward's: no hdim_v, paged, packgqa, split)."""

    kind: str
    sm: int
    tile: int
    hdim_v: int
    element: int
    softcap: int
    paged: int
    packgqa: int
    split: int


# Position of each argument in the mainloop's template list: tile shape (M, N, K=head dim), kHeadDimV,
# element type, and the flags a TU name carries.
_MAINLOOPS: dict[str, _Mainloop] = {
    "CollectiveMainloopFwdSm90": {
        "kind": "fwd",
        "sm": 90,
        "tile": 2,
        "hdim_v": 3,
        "element": 4,
        "softcap": 9,
        "paged": 11,
        "packgqa": 16,
        "split": 17,
    },
    "CollectiveMainloopFwdSm80": {
        "kind": "fwd",
        "sm": 80,
        "tile": 3,
        "hdim_v": 4,
        "element": 5,
        "softcap": 10,
        "paged": 12,
        "packgqa": 14,
        "split": 15,
    },
    "CollectiveMainloopBwdSm90": {"kind": "bwd", "sm": 90, "tile": 4, "element": 5, "softcap": 10},
    "CollectiveMainloopBwdSm80": {"kind": "bwd", "sm": 80, "tile": 2, "element": 3, "softcap": 8},
}
# The backward's pre/post-processing kernels: (kBlockM, kHeadDim) tile, element, arch; shared by a head
# dim's backward TUs with and without softcap.
_BWD_HELPERS = ("FlashAttnBwdPreprocess", "FlashAttnBwdPostprocessConvertdQ")
_DTYPES = {"cutlass::half_t": "fp16", "cutlass::bfloat16_t": "bf16", "cutlass::float_e4m3_t": "e4m3"}
_SCHEDULER = "prepare_varlen_num_blocks_kernel"
_COMBINE = "FlashAttnFwdCombine"
SCHEDULER_TU = "flash_prepare_scheduler.cu"
COMBINE_TU = "flash_fwd_combine.cu"


def template_args(name: str, template: str) -> list[str] | None:
    """The top-level template arguments of the first `template<...>` in a demangled name."""
    start = name.find(template + "<")
    if start < 0:
        return None
    depth = 0
    args: list[str] = []
    current: list[str] = []
    for char in name[start + len(template) :]:
        if char == "<":
            depth += 1
            if depth == 1:
                continue
        elif char == ">":
            depth -= 1
            if depth == 0:
                args.append("".join(current).strip())
                return args
        elif char == "," and depth == 1:
            args.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    return None


def _constants(arg: str) -> list[int]:
    """cute::tuple<cute::C<128>, cute::C<176>, cute::C<128> > -> [128, 176, 128]."""
    return [int(n) for n in re.findall(r"C<(\d+)>", arg)]


def _flag(args: list[str], position: int) -> bool:
    return args[position] == "true"


def _name(kind: str, hdim: str, dtype: str, suffix: str, sm: int) -> str:
    return f"instantiations/flash_{kind}_hdim{hdim}_{dtype}{suffix}_sm{sm}.cu"


def tu_of_kernel(name: str, tus: list[str] | tuple[str, ...]) -> str | None:
    """The TU of `tus` (the package's declared list, as faforge.families.flash_attn_3.backend.sources gives it)
    that holds the kernel `name`, or None for a kernel that is no FA3 kernel or not from any TU listed."""
    if _SCHEDULER in name:
        candidates = [SCHEDULER_TU]
    elif _COMBINE + "<" in name:
        candidates = [COMBINE_TU]
    else:
        candidates = _attention_candidates(name)
    return next((tu for tu in candidates if tu in tus), None)


def _attention_candidates(name: str) -> list[str]:
    for mainloop, at in _MAINLOOPS.items():
        args = template_args(name, mainloop)
        if args is None:
            continue
        dtype = _DTYPES.get(args[at["element"]])
        hdim = _constants(args[at["tile"]])[2]
        if dtype is None:
            return []
        softcap = _flag(args, at["softcap"])
        if at["kind"] == "bwd":
            return _bwd_candidates(hdim, dtype, at["sm"], softcap)
        hdim_v = int(args[at["hdim_v"]])
        label = str(hdim) if hdim_v == hdim else f"{hdim}_{hdim_v}"
        paged, split, packgqa = _flag(args, at["paged"]), _flag(args, at["split"]), _flag(args, at["packgqa"])
        stem = ("_paged" if paged else "") + ("_split" if split else "")
        if at["sm"] == 80:  # one TU per softcap setting, or both in a _softcapall TU; PackGQA always on
            return [
                _name("fwd", label, dtype, stem + "_softcapall", 80),
                _name("fwd", label, dtype, stem + ("_softcap" if softcap else ""), 80),
            ]
        # sm90: paged and split TUs always pack GQA (their PackGQA flag is set); _packgqa names the others
        pack = "_packgqa" if packgqa and not (paged or split) else ""
        return [_name("fwd", label, dtype, stem + ("_softcap" if softcap else "") + pack, 90)]
    for helper in _BWD_HELPERS:
        args = template_args(name, helper)
        if args is not None and args[1] in _DTYPES:
            sm = 90 if "Sm90" in args[3] else 80
            return [
                *_bwd_candidates(_constants(args[0])[1], _DTYPES[args[1]], sm, False),
                *_bwd_candidates(_constants(args[0])[1], _DTYPES[args[1]], sm, True),
            ]
    return []


def _bwd_candidates(hdim: int, dtype: str, sm: int, softcap: bool) -> list[str]:
    """sm90 backward TUs hold both softcap settings in a _softcapall TU when softcap is built; sm80's are apart."""
    plain = _name("bwd", str(hdim), dtype, "_softcap" if softcap else "", sm)
    return [_name("bwd", str(hdim), dtype, "_softcapall", sm), plain] if sm == 90 else [plain]


# A mangled kernel name as the host code registers it (__cudaRegisterFunction's device name), NUL-ended.
_REGISTERED = re.compile(rb"\x00(_ZN(?:7cutlass13device_kernel|5flash\d+\w*kernel)\w+)\x00")


def registered_kernels(path: Path) -> list[str] | None:
    """The demangled names of the kernels a binary registers with the CUDA runtime; None when it
    registers some but no demangler (libstdc++) is loadable here."""
    from faforge.abi.demangle import demangle  # noqa: PLC0415  (ctypes; only when asked)

    with (
        open(path, "rb") as handle,
        mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data,
    ):  # mapped, not read: a full build is large
        mangled = sorted({m.group(1).decode() for m in _REGISTERED.finditer(data)})
    names = [demangle(m) for m in mangled]
    if mangled and not any(names):
        return None
    return [n for n in names if n and "::{lambda" not in n]


def tus_in_binary(path: Path, tus: list[str] | tuple[str, ...]) -> dict[str, list[str]] | None:
    """{TU: [kernel, ...]} for the .cu TUs of `tus`, from the kernels `path` registers (None: not readable here)."""
    kernels = registered_kernels(path)
    if kernels is None:
        return None
    found: dict[str, list[str]] = {tu: [] for tu in tus if tu.endswith(".cu")}
    for kernel in kernels:
        tu = tu_of_kernel(kernel, tus)
        if tu is not None:
            found[tu].append(kernel)
    return found
