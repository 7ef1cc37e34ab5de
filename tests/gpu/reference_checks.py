"""faforge.gpu.reference against independent implementations, on the CPU.

Run by tests/gpu/test_reference.py in a venv with a real torch (the repo venv has none):
`python tests/gpu/reference_checks.py` exits 0 when every check holds and prints each check's name.
The independent reference is a per-query loop in float64 that applies flash-attn's documented
rules one by one (flash_attn_interface.py docstrings: bottom-right causal alignment, the sliding
window i + seqlen_k - seqlen_q - left <= j <= i + seqlen_k - seqlen_q + right, ALiBi bias
-slope * |i + seqlen_k - seqlen_q - j|); torch's own scaled_dot_product_attention is a second
witness where it can express the same thing.
"""

from __future__ import annotations

import math
import sys

import torch
import torch.nn.functional as F

from faforge.gpu.reference import apply_rotary, assert_within_reference_error, attention_ref


def naive_attention(
    q, k, v, *, causal=False, window=(-1, -1), softcap=0.0, slopes=None, key_lengths=None, keep=None, p=0.0
):
    batch, seqlen_q, heads, dim = q.shape
    groups = heads // k.shape[2]
    q, k, v = q.double(), k.double(), v.double()
    out = torch.zeros(batch, seqlen_q, heads, dim, dtype=torch.float64)
    for b in range(batch):
        seqlen_k = k.shape[1] if key_lengths is None else int(key_lengths[b])
        for h in range(heads):
            for i in range(seqlen_q):
                diagonal = i + seqlen_k - seqlen_q
                first, last = 0, seqlen_k - 1
                if causal:
                    last = min(last, diagonal)
                if window[0] >= 0:
                    first = max(first, diagonal - window[0])
                if window[1] >= 0:
                    last = min(last, diagonal + window[1])
                if first > last:
                    continue  # no visible key: flash-attn writes zeros
                js = torch.arange(first, last + 1)
                scores = k[b, js, h // groups] @ q[b, i, h] / math.sqrt(dim)
                if softcap:
                    scores = softcap * torch.tanh(scores / softcap)
                if slopes is not None:
                    scores = scores - float(slopes[b, h]) * (diagonal - js).abs()
                probs = torch.softmax(scores, dim=0)
                if keep is not None:
                    probs = probs * keep[b, h, i, js] / (1 - p)
                out[b, i, h] = probs @ v[b, js, h // groups]
    return out


def close(name, got, want, tol=2e-5):
    error = (got.double() - want.double()).abs().max().item()
    assert error <= tol, f"{name}: max error {error:.3g} > {tol}"
    print(f"ok  {name}  (max error {error:.1e})")


def qkv(batch=2, seqlen_q=37, seqlen_k=53, heads=4, kv_heads=2, dim=16, dtype=torch.float32):
    return (
        torch.randn(batch, seqlen_q, heads, dim, dtype=dtype),
        torch.randn(batch, seqlen_k, kv_heads, dim, dtype=dtype),
        torch.randn(batch, seqlen_k, kv_heads, dim, dtype=dtype),
    )


def check_against_naive():
    slopes = torch.rand(2, 4) * 0.3
    cases = {
        "full, GQA": dict(),
        "causal, seqlen_q < seqlen_k": dict(causal=True),
        "causal, seqlen_q > seqlen_k (rows with no key)": dict(causal=True, shape=(53, 37)),
        "sliding window (5, 3)": dict(window=(5, 3)),
        "causal sliding window (7, 0)": dict(causal=True, window=(7, -1)),
        "softcap 2": dict(softcap=2.0),
        "ALiBi": dict(slopes=slopes),
        "ALiBi, causal": dict(slopes=slopes, causal=True),
        "softcap, ALiBi, window": dict(softcap=3.0, slopes=slopes, window=(9, 4)),
    }
    for name, case in cases.items():
        seqlen_q, seqlen_k = case.pop("shape", (37, 53))
        q, k, v = qkv(seqlen_q=seqlen_q, seqlen_k=seqlen_k)
        window = case.get("window", (-1, -1))
        got = attention_ref(
            q,
            k,
            v,
            causal=case.get("causal", False),
            window=window,
            softcap=case.get("softcap", 0.0),
            alibi_slopes=case.get("slopes"),
        )
        close(name, got, naive_attention(q, k, v, **case))


def check_key_padding_and_dropout():
    q, k, v = qkv(seqlen_q=5, seqlen_k=64)
    lengths = torch.tensor([17, 64])
    valid = torch.arange(64) < lengths.view(-1, 1)
    for causal in (False, True):
        got = attention_ref(q, k, v, key_padding_mask=valid, causal=causal)
        close(f"KV-cache padding, causal={causal}", got, naive_attention(q, k, v, key_lengths=lengths, causal=causal))
    q, k, v = qkv()
    keep = torch.rand(2, 4, 37, 53) >= 0.25
    got = attention_ref(q, k, v, dropout_p=0.25, dropout_keep=keep, causal=True)
    close("dropout keep-mask, causal", got, naive_attention(q, k, v, keep=keep, p=0.25, causal=True))


def check_against_sdpa():
    q, k, v = qkv(seqlen_q=53, seqlen_k=53)
    as_sdpa = [t.transpose(1, 2) for t in (q, k.repeat_interleave(2, dim=2), v.repeat_interleave(2, dim=2))]
    for causal in (False, True):  # equal lengths: SDPA's top-left causal mask is the bottom-right one
        want = F.scaled_dot_product_attention(*as_sdpa, is_causal=causal).transpose(1, 2)
        close(f"SDPA, GQA, causal={causal}", attention_ref(q, k, v, causal=causal), want)


def check_rotary():
    x = torch.randn(2, 7, 3, 32)
    angle = torch.rand(40, 8) * 2 * math.pi
    offsets = torch.tensor([0, 21])
    positions = offsets.view(-1, 1) + torch.arange(7)
    turn = torch.polar(torch.ones_like(angle), angle)[positions].unsqueeze(2)  # (2, 7, 1, 8)
    pairs = torch.view_as_complex(x[..., :16].reshape(2, 7, 3, 8, 2).contiguous())
    want = torch.cat((torch.view_as_real(pairs * turn).flatten(-2), x[..., 16:]), dim=-1)
    close(
        "rotary, interleaved (GPT-J pairs)", apply_rotary(x, angle.cos(), angle.sin(), offsets, interleaved=True), want
    )
    halves = torch.complex(x[..., :8], x[..., 8:16]) * turn
    want = torch.cat((halves.real, halves.imag, x[..., 16:]), dim=-1)
    close("rotary, rotate-half (GPT-NeoX)", apply_rotary(x, angle.cos(), angle.sin(), offsets, interleaved=False), want)


def check_gradients_with_empty_rows():
    for dtype, upcast in ((torch.float32, True), (torch.bfloat16, False)):
        q, k, v = (t.requires_grad_() for t in qkv(seqlen_q=53, seqlen_k=37, dtype=dtype))
        out = attention_ref(q, k, v, causal=True, upcast=upcast, reorder_ops=not upcast)
        grads = torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
        assert all(torch.isfinite(g).all() for g in grads), f"non-finite gradient ({dtype})"
        assert (out[:, :16] == 0).all() and (grads[0][:, :16] == 0).all()
        print(f"ok  finite gradients with key-less rows ({dtype})")


def check_error_rule():
    exact = torch.zeros(4)
    assert_within_reference_error("within", exact + 2e-3, exact, exact + 1e-3, factor=2)
    try:
        assert_within_reference_error("outside", exact + 3e-3, exact, exact + 1e-3, factor=2)
    except AssertionError as exc:
        assert "outside: flash-attn max error 0.003 > 2 x" in str(exc), exc
    else:
        raise AssertionError("an error 3x the yardstick passed a 2x rule")
    print("ok  error rule")


def main() -> int:
    torch.manual_seed(0)
    for check in (
        check_against_naive,
        check_key_padding_and_dropout,
        check_against_sdpa,
        check_rotary,
        check_gradients_with_empty_rows,
        check_error_rule,
    ):
        check()
    return 0


if __name__ == "__main__":
    sys.exit(main())
