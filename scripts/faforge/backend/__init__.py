"""The build backend behind recipes/flash-attn/build_flash_attn.py: one module per concern.

The entry script parses arguments and orders the steps; these modules hold the logic, as plain
functions returning data. The recipe copies this folder to faforge_checker/faforge/backend (as it
copies the checker), and a local build imports the repository's copy, so both run the same code.
They import only the standard library and, inside functions, setuptools, torch and faforge.abi
(all shipped or in the host environment), so they run in a bare conda host environment.

Why the build replaces upstream's setup.py: that one
  * downloads a prebuilt wheel unless FLASH_ATTENTION_FORCE_BUILD=TRUE,
  * cannot force the pre-C++11 ABI (its FALSE leaves torch's default in place, which produced
    mislabelled "cxx11abiFALSE" wheels),
  * hard-codes -std=c++17, which torch >= 2.14 headers reject (c10/util/intrusive_ptr.h uses
    std::strong_ordering),
  * links with undefined symbols allowed, so a torch mismatch surfaces only as "undefined symbol"
    at import time.

The build has two parts (the split build, "kernels once per CUDA"):
  * the kernel library, libflash_attn_kernels.so (ninja.py): the kernel TUs compiled against the
    torch shim and never against torch's headers, so one build serves every torch minor and both
    C++ ABIs;
  * the glue, flash_attn_2_cuda (glue.py): flash_api.cpp compiled against the running Python's
    torch and linked with -Wl,--no-undefined against the kernel library.
"""
