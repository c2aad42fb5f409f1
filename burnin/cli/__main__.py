"""python -m burnin.cli: the burnin command, as before the CLI became a package."""

import sys

from burnin.cli import main

sys.exit(main())
