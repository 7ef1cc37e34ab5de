// faforge torch shim, for flash-attn kernel TUs only (see ../../README.md).
// All flash-attn's kernels take from this header is at::PhiloxCudaState, a kernel argument.
// Copied from torch's ATen/cuda/detail/PhiloxCudaStateRaw.cuh (BSD-3-Clause). Its layout depends on
// the torch: offset_intragraph_ is uint32_t up to torch 2.9 (24 bytes) and uint64_t from 2.10 (32
// bytes; pytorch/pytorch#164515), so the kernel library is built for one of the two
// (FAFORGE_PHILOX_OFFSET_INTRAGRAPH_BITS, default 64) and exports a symbol naming it, which the
// glue of a torch with the other layout cannot link against (api/flash_attn_kernels_api.h).
// tests/abi/test_params_layout.py checks both against every torch of the matrix.
#pragma once

#include <cstdint>

#ifndef FAFORGE_PHILOX_OFFSET_INTRAGRAPH_BITS
#define FAFORGE_PHILOX_OFFSET_INTRAGRAPH_BITS 64
#endif

namespace at {

struct PhiloxCudaState {
#if FAFORGE_PHILOX_OFFSET_INTRAGRAPH_BITS == 64
  using OffsetIntragraph = uint64_t;
#elif FAFORGE_PHILOX_OFFSET_INTRAGRAPH_BITS == 32
  using OffsetIntragraph = uint32_t;
#else
#error "FAFORGE_PHILOX_OFFSET_INTRAGRAPH_BITS must be 32 (torch <= 2.9) or 64 (torch >= 2.10)"
#endif

  PhiloxCudaState() = default;
  PhiloxCudaState(uint64_t seed, uint64_t offset) {
    seed_.val = seed;
    offset_.val = offset;
  }
  PhiloxCudaState(int64_t* seed, int64_t* offset_extragraph, OffsetIntragraph offset_intragraph) {
    seed_.ptr = seed;
    offset_.ptr = offset_extragraph;
    offset_intragraph_ = offset_intragraph;
    captured_ = true;
  }

  union Payload {
    uint64_t val;
    int64_t* ptr;
  };

  Payload seed_{};
  Payload offset_{};
  OffsetIntragraph offset_intragraph_ = 0;
  bool captured_ = false;
};

}  // namespace at
