"""`python -m superopt` runs the command line."""

import sys

from superopt.cli import main

sys.exit(main())
