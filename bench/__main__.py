"""``python -m bench``: run the benchmark (see :mod:`bench.run`); ``python -m bench decode``: ``replwire
decode`` against the naive script (see :mod:`bench.decode`)."""

import sys

if sys.argv[1:2] == ["decode"]:
    from .decode import main as decode

    sys.exit(decode(sys.argv[2:]))

from .run import main

sys.exit(main())
