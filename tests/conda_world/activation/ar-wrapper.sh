#!/bin/sh
# x86_64-conda-linux-gnu-ar stand-in (world.yaml).
exec /usr/bin/ar "$@"
