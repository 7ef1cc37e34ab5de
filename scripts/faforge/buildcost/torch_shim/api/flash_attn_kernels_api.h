// The kernel library's own C interface besides the run_mha_* launch functions (flash.h).
// Plain C types only: the library serves glue built with either C++ ABI and any torch.
#pragma once

#include <stdint.h>

extern "C" {
// Called by the shimmed C10_CUDA_CHECK / C10_CUDA_KERNEL_LAUNCH_CHECK of every kernel launch,
// with the CUDA error code (also on success, as torch's own check is) and the call site.
typedef void (*flash_attn_kernels_cuda_error_handler)(int32_t err, const char* file, const char* function,
                                                      uint32_t line);

// The glue installs torch's check here when it loads (torch_cuda_check.cpp), so a Python user sees
// the same error type as from a monolithic build. Without a handler a CUDA error throws
// std::runtime_error.
void flash_attn_kernels_set_cuda_error_handler(flash_attn_kernels_cuda_error_handler handler);
}
