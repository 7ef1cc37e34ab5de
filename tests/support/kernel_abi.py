"""A row of variants/kernel-abi.yaml for a torch a test adds to a scratch checkout's release table.

Every matrix torch minor needs its row (faforge.kernels.kernel_abi.PhiloxWidths), or no cell of it can be
generated. The row written here has the shim's layout (64-bit offset_intragraph_, torch >= 2.10) and a
made-up wheel digest: it stands for the row `faforge bump` measures from the real wheel
(faforge.kernels.measure_abi), for tests whose torch minor has no real wheel.
"""

from __future__ import annotations

from pathlib import Path

import yaml


def add_kernel_abi_row(variants_dir: Path, torch: str, reason: str) -> None:
    minor = ".".join(torch.split(".")[:2])
    path = variants_dir / "kernel-abi.yaml"
    if any(str(row.get("minor")) == minor for row in yaml.safe_load(path.read_text()).get("torch") or []):
        return  # measured from the real wheel (faforge bump): the made-up row would be its second verdict
    path.write_text(
        path.read_text()
        + (
            f"- minor: '{minor}'\n"
            f"  torch: {torch}\n"
            f"  wheel: torch-{torch}-cp311-cp311-manylinux_2_28_x86_64.whl\n"
            f"  sha256: '{'0' * 64}'\n"
            "  offset_intragraph: uint64_t\n"
            "  sizes: {philox_cuda_state: 32, flash_fwd_params: 472, flash_bwd_params: 648}\n"
            "  verdict: shared\n"
            f"  reason: {reason}\n"
        )
    )
