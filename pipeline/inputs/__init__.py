"""Input rows: the users' input files read as rows, and each row turned into the prompts a run sends.

Where the input is and how each format streams (`input_files`: jsonl, json arrays, parquet, arrow, datasets folders,
buckets, the Hub cache; `line_blocks`: a JSONL file as blocks of lines for worker processes), a row's conversation
read from each shape datasets use into OpenAI's (`conversations`: messages, ShareGPT, content parts, tool calls,
tools), a row's id (`ids`: the one rule the reader, the audit and the repaired export share), what a row already
holds (`stored`: its stored assistant turns split into reasoning and answer) and the validators' verdict on them
(`row_audit`), what an OpenAI batch line asks for (`batch_lines`), the reader that makes `Prompt`s and `BadInput`s
with ids, samples and duplicates found (`reader`), and a dataset's shape from its first rows (`sniff`). The run
(engine/), the audit and the repaired export (dataset/) read rows through here.
"""
