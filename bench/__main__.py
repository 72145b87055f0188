"""``python -m bench``: run the benchmark (see :mod:`bench.run`); ``python -m bench decode``: ``replwire
decode`` against the naive script (see :mod:`bench.decode`); ``python -m bench endtoend``: live capture and
decode under a write load (see :mod:`bench.endtoend`); ``python -m bench realschema``: ``replwire decode``
against a naive streaming-aware script on streams captured from real servers (see :mod:`bench.realschema`);
``python -m bench spark-realschema``: the Spark jobs on those streams (see :mod:`bench.spark_realschema`)."""

import sys

if sys.argv[1:2] == ["decode"]:
    from .decode import main as decode

    sys.exit(decode(sys.argv[2:]))
if sys.argv[1:2] == ["realschema"]:
    from .realschema import main as realschema

    sys.exit(realschema(sys.argv[2:]))
if sys.argv[1:2] == ["spark-realschema"]:
    from .spark_realschema import main as spark_realschema

    sys.exit(spark_realschema(sys.argv[2:]))
if sys.argv[1:2] == ["endtoend"]:
    from .endtoend import main as endtoend

    sys.exit(endtoend(sys.argv[2:]))

from .run import main

sys.exit(main())
