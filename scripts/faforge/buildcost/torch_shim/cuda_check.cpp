// faforge torch shim: the one function the shimmed kernel TUs call, compiled against the real
// torch of the cell (see README.md). c10_cuda_check_implementation's trailing parameters changed
// between torch minors (2.14 added CUDAErrorLogCapture* = nullptr); the five leading ones compile
// against both.
#include <c10/cuda/CUDAException.h>

#include <cstdint>

namespace faforge_shim {
void cuda_check(int32_t err, const char* file, const char* function, uint32_t line) {
  c10::cuda::c10_cuda_check_implementation(err, file, function, line, true);
}
}  // namespace faforge_shim
