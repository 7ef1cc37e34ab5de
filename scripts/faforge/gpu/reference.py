"""Plain PyTorch attention that the GPU suite compares flash-attn against.

Semantics follow upstream flash-attn's `attention_ref` (tests/test_util.py and
tests/test_flash_attn.py in the 2.8.3 sdist), written compactly here:

* q is (batch, seqlen_q, heads, dim); k and v are (batch, seqlen_k, heads_k, dim)
  with heads % heads_k == 0 (MQA/GQA repeat each k/v head heads/heads_k times).
* Causal and sliding-window masks are aligned to the bottom-right: query row i
  sits at key position i + seqlen_k - seqlen_q (seqlen_k counted per batch
  entry when a key padding mask is given, as for a KV cache, and key positions
  counted from cache_leftpad when it is given).
* softcap replaces scores s by softcap * tanh(s / softcap); ALiBi adds
  -slope * |i + seqlen_k - seqlen_q - j|; rows with no visible key give 0.
* Dropout is applied from an explicit keep-mask, scaled by 1 / (1 - p), so a
  mask read back from flash-attn reproduces its random choices.

`upcast=True` computes in fp32 (the "exact" answer, rounded to the input dtype at
the end); `upcast=False, reorder_ops=True` is the same math in the input precision
with k scaled instead of q: its error against the fp32 answer is the yardstick
flash-attn's error is held to (`assert_within_reference_error`).
"""

from __future__ import annotations

import math

import torch

from faforge.family import FLASH_ATTN


def key_offsets(
    seqlen_q: int,
    seqlen_k: int,
    key_lengths: torch.Tensor | None,
    device: torch.device | str,
    key_leftpad: torch.Tensor | None = None,
) -> torch.Tensor:
    """j - (i + seqlen_k - seqlen_q): how far key j lies right of query i's bottom-right-aligned diagonal.

    Shape (seqlen_q, seqlen_k), or (batch, 1, seqlen_q, seqlen_k) when each batch entry has its own key length.
    With `key_leftpad` (a KV cache's cache_leftpad), batch entry b's keys start at column key_leftpad[b].
    """
    row = torch.arange(seqlen_q, device=device).view(-1, 1)
    col = torch.arange(seqlen_k, device=device)
    if key_leftpad is not None:
        col = col - key_leftpad.view(-1, 1, 1, 1)
    sk = seqlen_k if key_lengths is None else key_lengths.view(-1, 1, 1, 1)
    return col - (row + sk - seqlen_q)


def outside_window(offsets: torch.Tensor, window: tuple[int, int]) -> torch.Tensor:
    """True where a key is outside the (left, right) window; a negative bound means unbounded."""
    left, right = window
    masked = torch.zeros_like(offsets, dtype=torch.bool)
    if right >= 0:
        masked = masked | (offsets > right)
    if left >= 0:
        masked = masked | (offsets < -left)
    return masked


def attention_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    window: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: torch.Tensor | None = None,
    key_padding_mask: torch.Tensor | None = None,
    key_leftpad: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    dropout_keep: torch.Tensor | None = None,
    upcast: bool = True,
    reorder_ops: bool = False,
    intermediate_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Attention output (batch, seqlen_q, heads, dim) in q's dtype; see the module docstring."""
    dtype = q.dtype
    if upcast:
        q, k, v = q.float(), k.float(), v.float()
    groups = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(groups, dim=2), v.repeat_interleave(groups, dim=2)
    seqlen_q, seqlen_k, dim = q.shape[1], k.shape[1], q.shape[-1]
    if reorder_ops:
        scores = torch.einsum("bthd,bshd->bhts", q, k / math.sqrt(dim))
    else:
        scores = torch.einsum("bthd,bshd->bhts", q / math.sqrt(dim), k)
    if softcap > 0:
        scores = torch.tanh(scores / softcap) * softcap
    key_lengths = None if key_padding_mask is None else key_padding_mask.sum(-1)
    offsets = key_offsets(seqlen_q, seqlen_k, key_lengths, q.device, key_leftpad)
    masked = torch.zeros(seqlen_q, seqlen_k, dtype=torch.bool, device=q.device)
    if key_padding_mask is not None:
        masked = masked | ~key_padding_mask.view(-1, 1, 1, seqlen_k)
    if causal:
        window = (window[0], 0)
    masked = masked | outside_window(offsets, window)
    scores = scores.masked_fill(masked, float("-inf"))
    if alibi_slopes is not None:
        scores = scores - alibi_slopes.view(-1, alibi_slopes.shape[-1], 1, 1) * offsets.abs()
    attention = torch.softmax(scores, dim=-1).to(v.dtype)
    attention = attention.masked_fill(masked.all(dim=-1, keepdim=True), 0.0)  # rows that see no key
    if dropout_keep is not None:
        attention = attention.masked_fill(~dropout_keep, 0.0)
    if intermediate_dtype is not None:  # an FP8 forward rounds P to fp8 before P @ V (upstream's test_util.py)
        attention = attention.to(intermediate_dtype).to(attention.dtype)
    out = torch.einsum("bhts,bshd->bthd", attention, v / (1 - dropout_p))
    return out.to(dtype)


def apply_rotary(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, offsets: torch.Tensor, *, interleaved: bool
) -> torch.Tensor:
    """Rotate the first 2 * cos.shape[-1] dims of x (batch, seqlen, heads, dim) at positions offsets[b] + i.

    Non-interleaved pairs dim i with i + rotary_dim/2 (GPT-NeoX); interleaved pairs 2i with 2i + 1 (GPT-J),
    as flash-attn's `rotary_interleaved` flag selects.
    """
    half = cos.shape[-1]
    positions = offsets.view(-1, 1).long() + torch.arange(x.shape[1], device=x.device)
    c, s = cos[positions].float().unsqueeze(2), sin[positions].float().unsqueeze(2)
    rotated = x[..., : 2 * half].float()
    x1, x2 = (rotated[..., 0::2], rotated[..., 1::2]) if interleaved else rotated.split(half, dim=-1)
    r1, r2 = x1 * c - x2 * s, x1 * s + x2 * c
    rotated = torch.stack((r1, r2), dim=-1).flatten(-2) if interleaved else torch.cat((r1, r2), dim=-1)
    return torch.cat((rotated.to(x.dtype), x[..., 2 * half :]), dim=-1)


def max_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item()


def assert_within_reference_error(
    name: str,
    flash: torch.Tensor,
    exact: torch.Tensor,
    same_precision: torch.Tensor,
    *,
    factor: float,
    atol: float = 1e-5,
) -> None:
    """Upstream's rule: flash-attn's error against the fp32 answer is at most `factor` times PyTorch's own
    error in the same precision, plus a small absolute epsilon."""
    error, yardstick = max_error(flash, exact), max_error(same_precision, exact)
    assert math.isfinite(error) and error <= factor * yardstick + atol, (
        f"{name}: {FLASH_ATTN.package} max error {error:.3g} > {factor} "
        f"x PyTorch's same-precision error {yardstick:.3g} + {atol:g}"
    )
