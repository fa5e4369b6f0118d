"""Datasets as files regen writes or reports on: the audit of an input dataset, the repaired dataset and exports.

The audit's pass over a whole dataset and its report (`audit`, `reservoirs`; each row is judged by
`pipeline.inputs.row_audit`), the repaired dataset, each original file rewritten in its own format (`repair`,
`rewrite`), training exports (`export`, `shapes`, `formats`, `tokenized`, `features`), every format reached through
one registry (`exporters`), the dataset card that names no host (`card`, `redact`) and Hub publishing (`hub`). Input
files are read through `pipeline.inputs`, RUN_DIR through `pipeline.store`.
"""
