"""The suite's test cases as data: every flash-attn call a test makes, as a faforge.gpu.dispatch.Call.

The test modules parametrize over these tables and build their tensors from the Call, so
`launch_table()` (which kernel TUs each test reaches, by emulating flash_api.cpp) describes exactly what
runs. tests/gpu/test_kernel_coverage.py checks here, without a GPU, that the table launches every TU of
the package on an H200; on a GPU the suite checks it against the profiler. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from faforge.gpu.dispatch import API_DENSE, API_KVCACHE, API_VARLEN, H200_SMS, Call, Launch, launches

DTYPE_NAMES = ("fp16", "bf16")
CAUSAL = {"full": False, "causal": True}
# (batch, heads, seqlen_q, seqlen_k). On an H200 (132 SMs, heuristic run with 264) the ragged shape goes to
# the split-KV TU for every head dim (8 x 2 query blocks < 0.8 x 264, at least two key blocks); the aligned
# shape fills the GPU (16 x 4 x 4 = 256 >= 211) so it takes the plain forward TU, on the Is_even_MN branch
# up to hdim 128 (256 and 512 are multiples of every block size); aligned-split is the split TU's even branch.
DENSE_SHAPES = {
    "ragged": (2, 4, 113, 301),
    "aligned": (4, 16, 256, 512),
    "aligned-split": (2, 4, 128, 512),
}
# Head dims between the kernel dims: padded to a multiple of 8, then run by the next kernel dim's TU.
IN_BETWEEN_HEAD_DIMS = (40, 80, 111, 160, 224)
# With causal=True flash-attn sets the right window edge to 0 itself.
MASKS: dict[str, dict[str, Any]] = {
    "sliding-window": {"window": (37, 21)},
    "softcap": {"softcap": 2.0},
    "alibi": {"alibi": True},
}
DROPOUT_P = 0.17


def _dense(dtype: str, dim: int, shape: str, causal: bool, **features: Any) -> Call:
    batch, heads, seqlen_q, seqlen_k = DENSE_SHAPES[shape]
    return Call(API_DENSE, dtype, dim, batch, heads, heads, seqlen_q, seqlen_k, causal=causal, **features)


def dense(head_dims: tuple[int, ...]) -> dict[str, Call]:
    """Every declared head dim x dtype x causal x shape, forward and backward."""
    return {
        f"{dtype}-hdim{dim}-{shape}-{c}": _dense(dtype, dim, shape, causal)
        for dtype in DTYPE_NAMES for dim in head_dims for shape in DENSE_SHAPES for c, causal in CAUSAL.items()
    }  # fmt: skip


def in_between() -> dict[str, Call]:
    return {
        f"{dtype}-hdim{dim}-{c}": _dense(dtype, dim, "ragged", causal)
        for dtype in DTYPE_NAMES for dim in IN_BETWEEN_HEAD_DIMS for c, causal in CAUSAL.items()
    }  # fmt: skip


def mqa_gqa() -> dict[str, Call]:
    """6 query heads sharing 1 or 2 k/v heads; seqlen_q > seqlen_k leaves causal rows that see no key."""
    return {
        f"{dtype}-{name}-{c}": Call(API_DENSE, dtype, 128, 2, 6, kv_heads, 217, 145, causal=causal)
        for dtype in DTYPE_NAMES for name, kv_heads in (("mqa", 1), ("gqa", 2)) for c, causal in CAUSAL.items()
    }  # fmt: skip


def masks_and_biases() -> dict[str, Call]:
    """Window (a causal window keeps its left edge: the non-causal TU's local kernel), softcap, ALiBi."""
    return {
        f"{dtype}-{name}-{c}": Call(API_DENSE, dtype, 96, 2, 4, 4, 137, 251, causal=causal, **features)
        for dtype in DTYPE_NAMES for name, features in MASKS.items() for c, causal in CAUSAL.items()
    }  # fmt: skip


def deterministic() -> dict[str, Call]:
    """deterministic=True: the backward's dq accumulation in a fixed order; two runs agree bit for bit."""
    return {
        f"bf16-hdim{dim}-{c}": _dense("bf16", dim, "ragged", causal)
        for dim in (64, 128) for c, causal in CAUSAL.items()
    }  # fmt: skip


VARLEN_LENGTHS = ([37, 129, 1, 200], [53, 64, 17, 211])  # one of length 1, one with more queries than keys


def varlen() -> dict[str, Call]:
    q_lens, k_lens = VARLEN_LENGTHS
    return {
        f"{dtype}-{name}-{c}": Call(API_VARLEN, dtype, 64, len(q_lens), 4, kv_heads, max(q_lens), max(k_lens),
                                    causal=causal)
        for dtype in DTYPE_NAMES for name, kv_heads in (("mha", 4), ("gqa", 2)) for c, causal in CAUSAL.items()
    }  # fmt: skip


def dropout_with_probs() -> dict[str, Call]:
    """return_attn_probs=True: the mask read back and checked against the reference, forward and backward."""
    return {
        f"{dtype}-hdim{dim}-{c}": Call(API_DENSE, dtype, dim, 2, 4, 4, 113, 203, causal=causal, dropout_p=DROPOUT_P)
        for dtype in DTYPE_NAMES for dim in (64, 128) for c, causal in CAUSAL.items()
    }  # fmt: skip


def dropout_training(head_dims: tuple[int, ...]) -> dict[str, Call]:
    """The training path (no probabilities returned): same seed -> same output and gradients, every head dim."""
    return {
        f"{dtype}-hdim{dim}-{c}": Call(API_DENSE, dtype, dim, 2, 4, 4, 113, 203, causal=causal, dropout_p=DROPOUT_P)
        for dtype in DTYPE_NAMES for dim in head_dims for c, causal in CAUSAL.items()
    }  # fmt: skip


# Uniform attention (q = k = 0) over 256 keys with v the identity: out[b, i, h, j] is 0 exactly where
# key j was dropped, so the training path's mask is read from its output. 512 x 256 draws per (batch, head).
DROPOUT_MASK_CALL = Call(API_DENSE, "bf16", 256, 2, 4, 4, 512, 256, dropout_p=DROPOUT_P, backward=False)
# The mean of DROPOUT_MEAN_SAMPLES outputs (one call each) converges to the p = 0 output.
DROPOUT_MEAN_CALL = Call(API_DENSE, "fp16", 64, 1, 2, 2, 64, 96, dropout_p=DROPOUT_P, backward=False)
DROPOUT_MEAN_SAMPLES = 2000


@dataclass(frozen=True)
class KvCase:
    """One flash_attn_with_kvcache call: the Call for dispatch, and what the test builds around it."""

    call: Call
    seqlen_new: int = 0  # keys/values appended (k, v given when > 0)
    rotary: str | None = None  # None, "half" (GPT-NeoX) or "interleaved" (GPT-J)
    leftpad: bool = False


KV_CAPACITY, KV_HEADS, KV_KV_HEADS, KV_DIM = 257, 6, 2, 128
PAGE = 256  # flash_api.cpp: "Paged KV cache block size must be divisible by 256"


def _kv(dtype: str, seqlen_q: int, **features: Any) -> Call:
    features.setdefault("backward", False)
    return Call(API_KVCACHE, dtype, KV_DIM, 2, KV_HEADS, KV_KV_HEADS, seqlen_q, KV_CAPACITY, **features)


def kvcache() -> dict[str, KvCase]:
    variants = {
        "append": lambda d: KvCase(_kv(d, 37, append_kv=True), seqlen_new=37),
        "append-causal": lambda d: KvCase(_kv(d, 37, causal=True, append_kv=True), seqlen_new=37),
        "rotary": lambda d: KvCase(_kv(d, 37, causal=True, append_kv=True), seqlen_new=37, rotary="half"),
        "rotary-interleaved": lambda d: KvCase(
            _kv(d, 37, causal=True, append_kv=True), seqlen_new=37, rotary="interleaved"
        ),
        "rotary-noncausal": lambda d: KvCase(_kv(d, 37, append_kv=True), seqlen_new=37, rotary="half"),
        "decode": lambda d: KvCase(_kv(d, 1, causal=True)),  # packs GQA heads into the query length
        "more-new-keys-than-queries": lambda d: KvCase(_kv(d, 5, causal=True, append_kv=True), seqlen_new=37),
        "cache-batch-idx": lambda d: KvCase(
            _kv(d, 37, causal=True, append_kv=True, cache_batch_idx=True), seqlen_new=37
        ),
        "paged": lambda d: KvCase(
            replace(_kv(d, 37, causal=True, append_kv=True, paged=True), seqlen_k=2 * PAGE), seqlen_new=37
        ),
        "leftpad": lambda d: KvCase(_kv(d, 37, causal=True, append_kv=True), seqlen_new=37, leftpad=True),
        "window": lambda d: KvCase(_kv(d, 37, window=(53, 7), append_kv=True), seqlen_new=37),
        "softcap": lambda d: KvCase(_kv(d, 37, causal=True, softcap=2.0)),
        "alibi": lambda d: KvCase(_kv(d, 37, causal=True, alibi=True)),
        "no-split": lambda d: KvCase(_kv(d, 37, causal=True, num_splits=1)),  # the plain forward TU from the cache
    }
    return {f"{dtype}-{name}": make(dtype) for dtype in DTYPE_NAMES for name, make in variants.items()}


def suite_calls(head_dims: tuple[int, ...]) -> dict[str, tuple[Call, ...]]:
    """{pytest node id: the calls that test makes}, for every test in the suite that calls flash-attn."""
    tests = {
        "test_attention.py::test_dense": dense(head_dims),
        "test_attention.py::test_in_between_head_dims": in_between(),
        "test_attention.py::test_mqa_gqa": mqa_gqa(),
        "test_attention.py::test_masks_and_biases": masks_and_biases(),
        "test_attention.py::test_deterministic": deterministic(),
        "test_attention.py::test_varlen": varlen(),
        "test_dropout.py::test_dropout_with_probs": dropout_with_probs(),
        "test_dropout.py::test_dropout_training_reproducible": dropout_training(head_dims),
        "test_kvcache.py::test_kvcache": {name: case.call for name, case in kvcache().items()},
    }
    table: dict[str, tuple[Call, ...]] = {
        f"{test}[{name}]": (call,) for test, cases in tests.items() for name, call in cases.items()
    }
    table["test_dropout.py::test_dropout_mask_per_batch_and_head"] = (DROPOUT_MASK_CALL,)
    table["test_dropout.py::test_dropout_mean_is_the_undropped_output"] = (
        DROPOUT_MEAN_CALL,
        replace(DROPOUT_MEAN_CALL, dropout_p=0.0),
    )
    return table


def launch_table(head_dims: tuple[int, ...], num_sms: int = H200_SMS) -> dict[str, tuple[Launch, ...]]:
    """{pytest node id: the kernel TU launches it makes} on a GPU with `num_sms` SMs."""
    return {
        test: tuple(dict.fromkeys(launch for call in calls for launch in launches(call, num_sms)))
        for test, calls in suite_calls(head_dims).items()
    }


def launched_tus(table: dict[str, tuple[Launch, ...]]) -> dict[str, list[str]]:
    """{TU: the tests that launch it}."""
    by_tu: dict[str, list[str]] = {}
    for test, found in table.items():
        for launch in found:
            by_tu.setdefault(launch.tu, []).append(test)
    return by_tu
