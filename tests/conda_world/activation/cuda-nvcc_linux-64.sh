# Stand-in for conda-forge's cuda-nvcc_linux-64 activation (written here, not copied), per
# https://github.com/conda-forge/cuda-nvcc-feedstock/blob/3451669/recipe/activate.sh (installed as
# etc/conda/activate.d/~cuda-nvcc_activate.sh, so it runs after the compilers' scripts): host-prefix
# CUDA headers and libraries through CFLAGS/CXXFLAGS/LDFLAGS and NVCC_APPEND_FLAGS, the host
# compiler through NVCC_PREPEND_FLAGS. It sets neither CUDA_HOME nor CUDA_INCLUDE_DIRS.
targetsDir="targets/x86_64-linux"
if [ "${CONDA_BUILD:-0}" = "1" ]; then
  CUDA_CFLAGS="-I${PREFIX}/${targetsDir}/include -I${PREFIX}/${targetsDir}/include/cccl -I${BUILD_PREFIX}/${targetsDir}/include -I${BUILD_PREFIX}/${targetsDir}/include/cccl"
  CUDA_LDFLAGS="-L${PREFIX}/${targetsDir}/lib -L${PREFIX}/${targetsDir}/lib/stubs -L${BUILD_PREFIX}/${targetsDir}/lib -L${BUILD_PREFIX}/${targetsDir}/lib/stubs"
else
  CUDA_CFLAGS="-I${CONDA_PREFIX}/${targetsDir}/include -I${CONDA_PREFIX}/${targetsDir}/include/cccl"
  CUDA_LDFLAGS="-L${CONDA_PREFIX}/${targetsDir}/lib -L${CONDA_PREFIX}/${targetsDir}/lib/stubs"
fi
export CFLAGS="${CFLAGS} ${CUDA_CFLAGS}" CPPFLAGS="${CPPFLAGS} ${CUDA_CFLAGS}" CXXFLAGS="${CXXFLAGS} ${CUDA_CFLAGS}"
export LDFLAGS="${LDFLAGS} ${CUDA_LDFLAGS}"
export NVCC_PREPEND_FLAGS="${NVCC_PREPEND_FLAGS:-} -ccbin=${CXX}"
if [ "${CONDA_BUILD:-0}" = "1" ]; then
  export NVCC_APPEND_FLAGS="${NVCC_APPEND_FLAGS:-} -I${PREFIX}/${targetsDir}/include -L${PREFIX}/${targetsDir}/lib -L${PREFIX}/${targetsDir}/lib/stubs"
fi
