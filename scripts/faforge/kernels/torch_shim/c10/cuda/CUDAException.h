// faforge torch shim, for flash-attn kernel TUs only (see ../../README.md).
// The two error-check macros flash-attn's kernels use, without torch: they call a function the
// extension defines in a host TU compiled against the real torch (cuda_check.cpp), so a kernel
// object references no torch symbol. torch 2.14 changed what its own macro calls
// (c10_cuda_check_implementation gained a CUDAErrorLogCapture* parameter).
#pragma once

#include <cstdint>
// torch's header brings these in transitively, and flash-attn's hardware_info.h relies on it
// (fprintf, stderr, exit) without including them.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime_api.h>

namespace faforge_shim {
void cuda_check(int32_t err, const char* file, const char* function, uint32_t line);
}  // namespace faforge_shim

#define C10_CUDA_CHECK(EXPR)                                                                   \
  do {                                                                                         \
    const cudaError_t __err = EXPR;                                                            \
    ::faforge_shim::cuda_check(static_cast<int32_t>(__err), __FILE__, __func__,                \
                               static_cast<uint32_t>(__LINE__));                               \
  } while (0)

#define C10_CUDA_KERNEL_LAUNCH_CHECK() C10_CUDA_CHECK(cudaGetLastError())
