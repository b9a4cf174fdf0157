"""``python -m pals_adapters.harness.cli``: the same as ``pals-bench``."""

import sys

from . import main

sys.exit(main())
