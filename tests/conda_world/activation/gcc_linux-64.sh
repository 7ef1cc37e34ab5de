# Stand-in for conda-forge's gcc_linux-64 activation (written here, not copied): the variables and
# values that conda-forge's script sets for linux-64 inside a conda build (CONDA_BUILD=1), per
# https://github.com/conda-forge/ctng-compiler-activation-feedstock/blob/52080ff/recipe/activate-gcc.sh
# and the linux_64 flags in recipe/build_scripts.sh at that commit. The compiler behind the names is
# this machine's GCC (tests/conda_world/world.yaml says so).
export HOST=x86_64-conda-linux-gnu BUILD=x86_64-conda-linux-gnu
export CONDA_TOOLCHAIN_HOST=x86_64-conda-linux-gnu CONDA_TOOLCHAIN_BUILD=x86_64-conda-linux-gnu
export build_alias=x86_64-conda-linux-gnu host_alias=x86_64-conda-linux-gnu
export CC="${CONDA_PREFIX}/bin/x86_64-conda-linux-gnu-cc" GCC="${CONDA_PREFIX}/bin/x86_64-conda-linux-gnu-gcc"
export CPP="${CONDA_PREFIX}/bin/x86_64-conda-linux-gnu-cpp"
export AR="${CONDA_PREFIX}/bin/x86_64-conda-linux-gnu-ar" LD="${CONDA_PREFIX}/bin/x86_64-conda-linux-gnu-ld"
export CONDA_BUILD_SYSROOT="${CONDA_PREFIX}/x86_64-conda-linux-gnu/sysroot"
if [ "${CONDA_BUILD:-0}" = "1" ]; then
  _faforge_p="${PREFIX}"
  export CFLAGS="-march=nocona -mtune=haswell -ftree-vectorize -fPIC -fstack-protector-strong -fno-plt -O2 -ffunction-sections -pipe -isystem ${PREFIX}/include -fdebug-prefix-map=${SRC_DIR}=/usr/local/src/conda/${PKG_NAME}-${PKG_VERSION} -fdebug-prefix-map=${PREFIX}=/usr/local/src/conda-prefix${CFLAGS:+ }${CFLAGS:-}"
  export CPPFLAGS="-DNDEBUG -D_FORTIFY_SOURCE=2 -O2 -isystem ${PREFIX}/include${CPPFLAGS:+ }${CPPFLAGS:-}"
  export LDFLAGS="-Wl,-O2 -Wl,--sort-common -Wl,--as-needed -Wl,-z,relro -Wl,-z,now -Wl,--disable-new-dtags -Wl,--gc-sections -Wl,--allow-shlib-undefined -Wl,-rpath,${PREFIX}/lib -Wl,-rpath-link,${PREFIX}/lib -L${PREFIX}/lib${LDFLAGS:+ }${LDFLAGS:-}"
else
  export CFLAGS="-march=nocona -mtune=haswell -ftree-vectorize -fPIC -fstack-protector-strong -fno-plt -O2 -ffunction-sections -pipe -isystem ${CONDA_PREFIX}/include${CFLAGS:+ }${CFLAGS:-}"
  export CPPFLAGS="-DNDEBUG -D_FORTIFY_SOURCE=2 -O2 -isystem ${CONDA_PREFIX}/include${CPPFLAGS:+ }${CPPFLAGS:-}"
  export LDFLAGS="-Wl,-O2 -Wl,--sort-common -Wl,--as-needed -Wl,-z,relro -Wl,-z,now -Wl,--disable-new-dtags -Wl,--gc-sections -Wl,--allow-shlib-undefined -Wl,-rpath,${CONDA_PREFIX}/lib -Wl,-rpath-link,${CONDA_PREFIX}/lib -L${CONDA_PREFIX}/lib${LDFLAGS:+ }${LDFLAGS:-}"
fi
