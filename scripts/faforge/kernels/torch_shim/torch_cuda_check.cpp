// The flash-attn glue's side of the shim's check macros, compiled against the cell's real torch:
// when the glue loads, it hands torch's own CUDA check to the kernel library, so a failed launch
// raises what a monolithic build raises (torch's c10::Error family, e.g. torch.AcceleratorError
// in torch >= 2.8) with torch's device-side-assertion report. c10_cuda_check_implementation's
// trailing parameters changed between torch minors (2.14 added CUDAErrorLogCapture* = nullptr);
// the five leading ones compile against every torch the matrix serves.
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDAException.h>

#include <cstdint>

#include "flash_attn_kernels_api.h"

// The build script reads FAFORGE_PHILOX_OFFSET_INTRAGRAPH_BITS from this torch's header; the real type
// decides, so a wrong reading stops the build here.
static_assert(sizeof(at::PhiloxCudaState) == (FAFORGE_PHILOX_OFFSET_INTRAGRAPH_BITS == 64 ? 32 : 24),
              "FAFORGE_PHILOX_OFFSET_INTRAGRAPH_BITS does not match this torch's at::PhiloxCudaState");

namespace {
void torch_cuda_check(int32_t err, const char* file, const char* function, uint32_t line) {
  c10::cuda::c10_cuda_check_implementation(err, file, function, line, true);
}

// Reading the layout symbol makes the glue need the library built for its torch's layout; volatile, so
// the optimizer cannot drop the read (a plain `> 0` was folded away and the glue linked anyway).
const bool handler_installed =
    (flash_attn_kernels_set_cuda_error_handler(&torch_cuda_check),
     *static_cast<const volatile int*>(&FLASH_ATTN_KERNELS_LAYOUT_SYMBOL) > 0);
}  // namespace
