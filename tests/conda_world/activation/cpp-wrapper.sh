#!/bin/sh
# x86_64-conda-linux-gnu-cpp stand-in (world.yaml).
exec /usr/bin/cpp "$@"
