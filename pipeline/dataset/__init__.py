"""Datasets as files: the users' input files, the assistant turns they store, and what regen writes from a run.

Reading input files (jsonl, json arrays, parquet, arrow, buckets: `input_files`, `line_blocks`, `sniff`), the stored
turns and their audit (`stored`, `audit`, `reservoirs`), the repaired dataset, each file rewritten in its own format
(`repair`, `rewrite`), training exports (`export`, `shapes`, `formats`, `tokenized`, `features`), the dataset card
that names no host (`card`, `redact`) and Hub publishing (`hub`). RUN_DIR is read through `pipeline.store`.
"""
