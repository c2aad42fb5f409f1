"""python -m burnin.cli: the burnin command, for a script that names the CLI package
(`python -m burnin` and the installed `burnin` are the same command)."""

import sys

from burnin.cli import main

sys.exit(main())
