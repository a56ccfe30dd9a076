"""Seq2Seq (NMT) input pipeline: IWSLT15 en-vi-shaped synthetic sentence pairs and the tokenized
parallel-text reader it shares with transformer (workloads/_text/parallel.py).

Framework neutral (NumPy only). Batches hold padded id matrices; `work` is sentence pairs and
`extra_work` the tokens (source + target) for the tokens/s metric. `batches(source, hp,
batch_size, seed)` reads "synthetic" or a folder laid out as workload.toml's dataset_layout says.
"""

import sys
from pathlib import Path

if str(Path(__file__).parents[1]) not in sys.path:  # workloads/: the translation models' shared reader
    sys.path.append(str(Path(__file__).parents[1]))
from _text import parallel as _text  # noqa: E402

DataError = _text.DataError
Batch = _text.Batch
SYNTHETIC = _text.SYNTHETIC
batches, check_source = _text.entry_points("IWSLT15 en-vi")
synthetic_batches = _text.synthetic_batches
reference_batch = _text.reference_batch
