// faforge torch shim, for flash-attn kernel TUs only (see ../../README.md).
// All flash-attn's kernels take from this header is at::PhiloxCudaState, a kernel argument.
// Copied from torch's ATen/cuda/detail/PhiloxCudaStateRaw.cuh (BSD-3-Clause; the same in torch
// 2.11.0 and 2.14.1); tests/buildcost/test_torch_shim.py checks its layout against the real one.
#pragma once

#include <cstdint>

namespace at {

struct PhiloxCudaState {
  PhiloxCudaState() = default;
  PhiloxCudaState(uint64_t seed, uint64_t offset) {
    seed_.val = seed;
    offset_.val = offset;
  }
  PhiloxCudaState(int64_t* seed, int64_t* offset_extragraph, uint64_t offset_intragraph) {
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
  uint64_t offset_intragraph_ = 0;
  bool captured_ = false;
};

}  // namespace at
