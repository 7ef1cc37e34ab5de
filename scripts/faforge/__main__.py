import sys

try:
    from faforge.cli import main
except KeyboardInterrupt:  # Ctrl-C before main() could catch it: still no traceback
    sys.exit(130)

sys.exit(main())
