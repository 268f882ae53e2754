"""`python -m rollmux_cli`: the same as the `rollmux` console script."""

import sys

from rollmux_cli.cli import main

sys.exit(main())
