"""FA3's attention calls against the fp32 reference, each where the package's declaration says the
binary holds it (faforge.families.flash_attn_3.gpu_gate: build_flags, head dims, dtypes): dense, MQA/GQA,
local windows, softcap, split KV, varlen and the FP8 forward. The rule they are held to is
faforge.families.flash_attn_3.gpu_suite.harness's; the KV cache is test_fa3_kvcache.py's.
"""

from __future__ import annotations

import itertools

import pytest

from faforge.families.flash_attn_3.gpu_gate import evaluate
from faforge.families.flash_attn_3.gpu_suite import gate_marks, needs

pytestmark = gate_marks()
GATE = evaluate()
if GATE.usable:
    import torch
    from flash_attn_interface import flash_attn_func, flash_attn_varlen_func

    from faforge.families.flash_attn_3.gpu_suite.harness import (
        BATCH,
        DEVICE,
        DTYPES,
        HEADS,
        check,
        forward_backward,
        inputs,
    )
    from faforge.gpu.reference import attention_ref

SHAPES = {
    "ragged": (113, 203),
    "aligned": (256, 512),
    "long": (1023, 1024),
}  # (seqlen_q, seqlen_k), from upstream's list
CAUSAL = {"full": False, "causal": True}
KV_HEADS = {"mqa": 1, "gqa": 2}
VARLEN_LENGTHS = ([37, 129, 1, 200], [53, 64, 17, 211])  # one of length 1, one with more queries than keys


def cases(*axes: dict) -> list:
    return [
        pytest.param(*(axis[key] for axis, key in zip(axes, keys, strict=True)), id="-".join(keys))
        for keys in itertools.product(*axes)
    ]


DENSE = [
    pytest.param(dtype, dim, SHAPES[shape], causal, id=f"{dtype}-hdim{dim}-{shape}-{c}")
    for dtype in GATE.dtypes
    for dim in GATE.head_dims
    for shape in SHAPES
    for c, causal in CAUSAL.items()
]


@pytest.mark.parametrize("dtype, head_dim, shape, causal", DENSE)
def test_dense(dtype: str, head_dim: int, shape: tuple[int, int], causal: bool) -> None:
    """Every declared head dim and dtype, causal and not, on ragged and block-aligned lengths."""
    forward_backward(
        f"{dtype} hdim{head_dim} {shape} causal={causal}", *inputs(DTYPES[dtype], *shape, head_dim), causal=causal
    )


@pytest.mark.parametrize("kv_heads, causal", cases(KV_HEADS, CAUSAL))
def test_mqa_gqa(kv_heads, causal):
    """6 query heads sharing 1 or 2 k/v heads; PackGQA too where it is built."""
    dim = GATE.head_dims[0]
    q, k, v = inputs(DTYPES["bf16"], 217, 145, dim, kv_heads=kv_heads)
    forward_backward(f"{kv_heads} kv heads causal={causal}", q, k, v, causal=causal)
    if GATE.enabled("PACKGQA"):
        forward_backward(f"{kv_heads} kv heads pack_gqa causal={causal}", q, k, v, causal=causal, pack_gqa=True)


@needs("LOCAL")
@pytest.mark.parametrize("causal", CAUSAL.values(), ids=CAUSAL)
def test_local_window(causal):
    forward_backward(
        f"window (37, 21) causal={causal}",
        *inputs(DTYPES["bf16"], 137, 251, GATE.head_dims[0]),
        causal=causal,
        window=(37, 21),
    )


@needs("SOFTCAP")
def test_softcap():
    """Upstream scales q by softcap / 4 and allows rtol 3 and 3e-4 more on the gradients."""
    q, k, v = inputs(DTYPES["bf16"], 137, 251, GATE.head_dims[0], scale=0.5)
    forward_backward("softcap 2.0", q, k, v, softcap=2.0, rtol=3, grad_atol=3e-4)


@needs("SPLIT")
def test_split_kv():
    """num_splits=3: the split-KV forward and the combine kernel (forward only, as upstream)."""
    q, k, v = inputs(DTYPES["bf16"], 113, 1024, GATE.head_dims[0])
    out = flash_attn_func(q, k, v, num_splits=3)
    check("num_splits=3: out", out, attention_ref(q, k, v), attention_ref(q, k, v, upcast=False, reorder_ops=True))


@needs("VARLEN")
@pytest.mark.parametrize("causal", CAUSAL.values(), ids=CAUSAL)
def test_varlen(causal):
    """Four packed sequences of ragged lengths, forward and backward."""
    torch.manual_seed(0)
    q_lens, k_lens = VARLEN_LENGTHS
    dim, dtype = GATE.head_dims[0], DTYPES["bf16"]
    q = torch.randn(sum(q_lens), HEADS, dim, device=DEVICE, dtype=dtype).requires_grad_()
    k, v = (torch.randn(sum(k_lens), HEADS, dim, device=DEVICE, dtype=dtype).requires_grad_() for _ in range(2))
    cu_q, cu_k = ([0, *itertools.accumulate(lens)] for lens in (q_lens, k_lens))
    out = flash_attn_varlen_func(
        q,
        k,
        v,
        torch.tensor(cu_q, dtype=torch.int32, device=DEVICE),
        torch.tensor(cu_k, dtype=torch.int32, device=DEVICE),
        max(q_lens),
        max(k_lens),
        causal=causal,
    )

    def reference(**precision):
        return torch.cat(
            [
                attention_ref(q[qa:qb][None], k[ka:kb][None], v[ka:kb][None], causal=causal, **precision)[0]
                for qa, qb, ka, kb in zip(cu_q, cu_q[1:], cu_k, cu_k[1:], strict=False)
            ]
        )

    exact, same_precision = reference(), reference(upcast=False, reorder_ops=True)
    check(f"varlen causal={causal}: out", out, exact, same_precision)
    if GATE.enabled("BACKWARD"):
        grad_out = torch.randn_like(out)
        grads = [torch.autograd.grad(o, (q, k, v), grad_out) for o in (out, exact, same_precision)]
        for label, got, want, yardstick in zip(("dq", "dk", "dv"), *grads, strict=True):
            check(f"varlen causal={causal}: {label}", got, want, yardstick)


@needs("FP8")
@pytest.mark.parametrize("causal", CAUSAL.values(), ids=CAUSAL)
def test_fp8_forward(causal):
    """e4m3 inputs, bf16 output, forward only; the yardstick rounds P to fp8 as the kernel does."""
    if GATE.capability is None or GATE.capability[0] != 9:
        pytest.skip("FA3's FP8 forward runs on sm_90 only")
    torch.manual_seed(0)
    dim = GATE.head_dims[-1]
    q_ref, k_ref, v_ref = (
        torch.randn(BATCH, n, h, dim, device=DEVICE, dtype=torch.bfloat16).to(torch.float8_e4m3fn).to(torch.bfloat16)
        for n, h in ((256, HEADS), (512, HEADS), (512, HEADS))
    )
    out = flash_attn_func(*(t.to(torch.float8_e4m3fn) for t in (q_ref, k_ref, v_ref)), causal=causal)
    exact = attention_ref(q_ref, k_ref, v_ref, causal=causal)
    same_precision = attention_ref(
        q_ref, k_ref, v_ref, causal=causal, upcast=False, reorder_ops=True, intermediate_dtype=torch.float8_e4m3fn
    )
    check(f"fp8 causal={causal}: out", out, exact, same_precision)
