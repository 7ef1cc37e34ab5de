// The kernel library's own C interface besides the run_mha_* launch functions (flash.h).
// Plain C types only: the library serves glue built with either C++ ABI and any torch.
#pragma once

#include <stdint.h>

// The at::PhiloxCudaState layout the library was compiled for (ATen/cuda/CUDAGeneratorImpl.h here) is
// part of its name: the library defines flash_attn_kernels_philox_offset_intragraph_u32 or _u64, and
// the glue references the one of its torch, so a mismatch fails the glue's link (-Wl,--no-undefined)
// and its import ("undefined symbol"), never as kernels reading Flash_fwd_params at wrong offsets.
#ifndef FAFORGE_PHILOX_OFFSET_INTRAGRAPH_BITS
#define FAFORGE_PHILOX_OFFSET_INTRAGRAPH_BITS 64
#endif
#define FLASH_ATTN_KERNELS_CAT2(a, b) a##b
#define FLASH_ATTN_KERNELS_CAT(a, b) FLASH_ATTN_KERNELS_CAT2(a, b)
#define FLASH_ATTN_KERNELS_LAYOUT_SYMBOL \
  FLASH_ATTN_KERNELS_CAT(flash_attn_kernels_philox_offset_intragraph_u, FAFORGE_PHILOX_OFFSET_INTRAGRAPH_BITS)

extern "C" {
// Called by the shimmed C10_CUDA_CHECK / C10_CUDA_KERNEL_LAUNCH_CHECK of every kernel launch,
// with the CUDA error code (also on success, as torch's own check is) and the call site.
typedef void (*flash_attn_kernels_cuda_error_handler)(int32_t err, const char* file, const char* function,
                                                      uint32_t line);

// The glue installs torch's check here when it loads (torch_cuda_check.cpp), so a Python user sees
// the same error type as from a monolithic build. Without a handler a CUDA error throws
// std::runtime_error.
void flash_attn_kernels_set_cuda_error_handler(flash_attn_kernels_cuda_error_handler handler);

// sizeof(at::PhiloxCudaState) as the library was compiled (24 or 32); see the layout note above.
extern const int FLASH_ATTN_KERNELS_LAYOUT_SYMBOL;
}
