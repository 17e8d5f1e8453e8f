"""`python -m sweep ...` is the `sweep` command."""

import sys

from sweep.cli.main import main

sys.exit(main())
