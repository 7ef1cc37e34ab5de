#!/bin/sh
# x86_64-conda-linux-gnu-ld stand-in (world.yaml).
exec /usr/bin/ld "$@"
