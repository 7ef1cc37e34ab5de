import sys

try:
    from faforge.interrupts import deliver_swallowed_interrupts

    deliver_swallowed_interrupts()  # before the imports below: Ctrl-C inside importlib's callbacks
    from faforge.cli import console_main
except KeyboardInterrupt:  # Ctrl-C before main() could catch it: still no traceback
    sys.exit(130)

sys.exit(console_main())
