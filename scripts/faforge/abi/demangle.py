"""Itanium C++ demangling through libstdc++'s own `abi::__cxa_demangle`.

This is what `c++filt` prints, without running a program: the function is
called through ctypes from the libstdc++ that every torch install already has
(PyPI's `cxxfilt` does the same, but locates the library by running `ldconfig`
and `gcc` through ctypes.util.find_library, and it would be one more package
to ship into test environments).  When no libstdc++ can be loaded,
`demangle` returns None and callers show the mangled name alone.
"""

from __future__ import annotations

import ctypes
import functools

LIBSTDCXX = "libstdc++.so.6"


@functools.cache
def _functions():
    try:
        cxx = ctypes.CDLL(LIBSTDCXX)
        libc = ctypes.CDLL(None)
        cxa_demangle = cxx.__cxa_demangle
    except (OSError, AttributeError):
        return None
    cxa_demangle.restype = ctypes.c_void_p
    cxa_demangle.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.free.restype = None
    return cxa_demangle, libc.free


def available() -> bool:
    return _functions() is not None


@functools.lru_cache(maxsize=65536)
def demangle(name: str) -> str | None:
    """`c10::cuda::SetDevice(signed char, bool)` for `_ZN3c104cuda9SetDeviceEab`; the name itself
    for a C symbol; None when it cannot be demangled here."""
    if not name.startswith("_Z"):
        return name
    functions = _functions()
    if functions is None:
        return None
    cxa_demangle, free = functions
    status = ctypes.c_int(0)
    pointer = cxa_demangle(name.encode("latin-1"), None, None, ctypes.byref(status))
    if not pointer:
        return None
    try:
        return ctypes.string_at(pointer).decode("latin-1") if status.value == 0 else None
    finally:
        free(pointer)
