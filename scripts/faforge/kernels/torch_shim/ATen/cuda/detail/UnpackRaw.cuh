// faforge torch shim, for flash-attn kernel TUs only (see ../../../README.md).
// at::cuda::philox::unpack, copied from torch's ATen/cuda/detail/UnpackRaw.cuh (BSD-3-Clause; the
// same in torch 2.11.0 and 2.14.1).
#pragma once

#include <cstdint>
#include <tuple>

#include <ATen/cuda/CUDAGeneratorImpl.h>

namespace at::cuda::philox {

__host__ __device__ __forceinline__ std::tuple<uint64_t, uint64_t> unpack(at::PhiloxCudaState arg) {
  if (arg.captured_) {
    return std::make_tuple(static_cast<uint64_t>(*arg.seed_.ptr),
                           static_cast<uint64_t>(*(arg.offset_.ptr) + arg.offset_intragraph_));
  } else {
    return std::make_tuple(arg.seed_.val, arg.offset_.val);
  }
}

}  // namespace at::cuda::philox
