"""python -m burnin: the burnin command."""

import sys

from burnin.cli import main

sys.exit(main())
