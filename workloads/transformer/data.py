"""Transformer input pipeline: WMT14 en-de-shaped synthetic sentence pairs and the tokenized
parallel-text reader it shares with seq2seq (workloads/_shared/parallel_text.py).

Framework neutral (NumPy only). Batches hold padded id matrices; `work` is sentence pairs and
`extra_work` the tokens (source + target) for the tokens/s metric. `batches(source, hp,
batch_size, seed)` reads "synthetic" or a folder laid out as workload.toml's dataset_layout says.
"""


from _shared import parallel_text as _text

DataError = _text.DataError
Batch = _text.Batch
SYNTHETIC = _text.SYNTHETIC
batches, check_source = _text.entry_points("WMT14 en-de")
synthetic_batches = _text.synthetic_batches
reference_batch = _text.reference_batch
input_shape = _text.input_shape
