"""The ABI gate: does an extension load against a torch, and if not, why.

Read -> resolve -> judge -> report, one module each, on the standard library and
pyelftools only (the package is shipped into build and test environments that
have little else; the recipe lists pyelftools there):
  elf       ELF header and DT_NEEDED/SONAME/RPATH/RUNPATH; read_info/read_dynamic_symbols/read_elf
  elf_file  an open ELF file: header, section table, bounds-checked section reads
  elf_symbols  .dynsym as columns; elf_versions  .gnu.version*; elf_hash  .gnu.hash lookups
  fatbin    SASS/PTX architectures in .nv_fatbin, without CUDA tools
  resolve   the DT_NEEDED closure as ld.so finds it, and which library each symbol binds to
  ld_search how ld.so finds one needed name (search order, ld.so.conf, $ORIGIN, Misplaced)
  library   one found library: its tables read on first use, and what binds to it
  signature a demangled name split into qualified name, parameters and mangled search key
  classify  C++ ABI from mangled names; missing symbols as abi-mismatch / signature-drift / ...
  demangle  libstdc++'s __cxa_demangle through ctypes
  report    the verdict as data and its JSON (version 1); report_text  the verdict in words
  inputs    what a package loads inside a .so, wheel, .conda/.tar.bz2 or folder: extension modules, torch.ops libraries
  library_sets  per-torch library sets: the member a package picks for a torch (variants/torch-library-sets.yaml)
  load_problems  what ld.so refuses in one load: a missing library, a version, an unbound symbol
  check     all of the above for one PATH: check_path(), check_module(), torch_facts()
  platforms the conda subdirs and their machines (uname -m, ELF, wheel tag), for every layer above
  gate      `python -m faforge.abi.gate`, the recipe's test-time entry point
The CLI is faforge.commands.check_abi (`faforge check-abi`).
"""
