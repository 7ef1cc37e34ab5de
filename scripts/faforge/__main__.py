import sys

from faforge.cli import main

sys.exit(main())
