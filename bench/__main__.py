"""``python -m bench``: run the benchmark (see :mod:`bench.run`)."""

import sys

from .run import main

sys.exit(main())
