# Stand-in for conda-forge's gxx_linux-64 activation (written here, not copied), per
# https://github.com/conda-forge/ctng-compiler-activation-feedstock/blob/52080ff/recipe/activate-g++.sh
# and FINAL_CXXFLAGS_linux_64 in recipe/build_scripts.sh at that commit (note its -std=c++17).
export CXX="${CONDA_PREFIX}/bin/x86_64-conda-linux-gnu-c++" GXX="${CONDA_PREFIX}/bin/x86_64-conda-linux-gnu-g++"
if [ "${CONDA_BUILD:-0}" = "1" ]; then
  export CXXFLAGS="-fvisibility-inlines-hidden -std=c++17 -fmessage-length=0 -march=nocona -mtune=haswell -ftree-vectorize -fPIC -fstack-protector-strong -fno-plt -O2 -ffunction-sections -pipe -isystem ${PREFIX}/include -fdebug-prefix-map=${SRC_DIR}=/usr/local/src/conda/${PKG_NAME}-${PKG_VERSION} -fdebug-prefix-map=${PREFIX}=/usr/local/src/conda-prefix${CXXFLAGS:+ }${CXXFLAGS:-}"
else
  export CXXFLAGS="-fvisibility-inlines-hidden -std=c++17 -fmessage-length=0 -march=nocona -mtune=haswell -ftree-vectorize -fPIC -fstack-protector-strong -fno-plt -O2 -ffunction-sections -pipe -isystem ${CONDA_PREFIX}/include${CXXFLAGS:+ }${CXXFLAGS:-}"
fi
