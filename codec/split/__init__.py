"""Split decoding: a captured stream cut into parts that decode independently, with the same result as the
single-process :class:`~replwire.codec.Assembler`.

The files of one stream are opened and their records read by :mod:`replwire.codec.io.segments`
(re-exported here: ``open_inputs``, ``read_records``); ``first_pass`` (:func:`plan`) is the cheap
first pass that cuts them into :class:`Part` s (``parts``) and resolves what each needs from elsewhere (table
shapes, stream state, the fate of its transactions), merging what ``skim`` reads of the inputs run by run;
``decode`` decodes a part (the whole stream in one process is
:func:`replwire.codec.decode.committed`); ``columns`` gives a part's change rows with the compiled codec
writing the columns of its plain transactions, and ``compiled`` drives the compiled row and column paths
beside the Python reader.
:mod:`replwire.spark` maps parts onto Spark partitions.
"""

from ..io.segments import Input, open_inputs, read_records, text_encoding
from ..stream.outcome import Outcome
from .decode import Decoded, decode_part
from .first_pass import plan
from .parts import Part, Plan, RelationVersion, Shapes

__all__ = ["Decoded", "Input", "Outcome", "Part", "Plan", "RelationVersion", "Shapes", "decode_part", "open_inputs",
           "plan", "read_records", "text_encoding"]
