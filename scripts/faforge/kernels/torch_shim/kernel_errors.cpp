// The kernel library's side of the shim's check macros (c10/cuda/CUDAException.h here): no torch.
// Part of libflash_attn_kernels.so; see api/flash_attn_kernels_api.h for who installs the handler.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <stdexcept>

#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <cuda_runtime_api.h>

#include "flash_attn_kernels_api.h"

extern "C" const int FLASH_ATTN_KERNELS_LAYOUT_SYMBOL = sizeof(at::PhiloxCudaState);

namespace {
std::atomic<flash_attn_kernels_cuda_error_handler> installed_handler{nullptr};
}  // namespace

extern "C" void flash_attn_kernels_set_cuda_error_handler(flash_attn_kernels_cuda_error_handler handler) {
  installed_handler.store(handler);
}

namespace faforge_shim {
void cuda_check(int32_t err, const char* file, const char* function, uint32_t line) {
  if (auto handler = installed_handler.load()) {
    handler(err, file, function, line);
    return;
  }
  if (err == cudaSuccess) {
    return;
  }
  // A C string, not std::string: the library then needs no symbol of either C++ ABI from libstdc++.
  char message[1024];
  std::snprintf(message, sizeof message, "CUDA error: %s (%d) at %s:%u in %s [libflash_attn_kernels]",
                cudaGetErrorString(static_cast<cudaError_t>(err)), static_cast<int>(err), file, line, function);
  throw std::runtime_error(message);
}
}  // namespace faforge_shim
