"""`python -m sweep.cli ...` is the `sweep` command."""

import sys

from sweep.cli.main import main

sys.exit(main())
