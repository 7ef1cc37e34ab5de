#!/bin/sh
# x86_64-conda-linux-gnu-gcc stand-in: this machine's GCC under conda-forge's name (world.yaml).
exec /usr/bin/gcc "$@"
