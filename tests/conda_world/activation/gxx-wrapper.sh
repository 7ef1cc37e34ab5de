#!/bin/sh
# x86_64-conda-linux-gnu-g++ stand-in: this machine's G++ under conda-forge's name (world.yaml).
exec /usr/bin/g++ "$@"
