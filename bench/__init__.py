"""replwire's benchmark against its peers: ``python -m bench`` (see ``bench/README.md``).

Strategy: a plain package at the repository root, never installed; each module does one thing --
corpora (:mod:`bench.corpus`), the codecs under test (:mod:`bench.codecs`), the hand-written yardstick
(:mod:`bench.yardstick`), measurement (:mod:`bench.measure`), the 1 GB streaming check
(:mod:`bench.stream`), the command (:mod:`bench.run`) and the report (:mod:`bench.report`).
"""
