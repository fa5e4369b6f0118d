"""What regen knows of SGLang's releases, read from their source (shared/SGLANG.md, docs/sglang-versions.md).

A leaf: pure data and pure functions, importing nothing else of regen. `releases` parses and orders versions and
names each behaviour change by the release that brought it; `models` is the one table of hybrid (mamba) models;
`flags` every release's launch flags; `resolution` how a release resolves its launch flags, or refuses to start;
`capacity` how many requests a resolved server runs at once. Preflight and launch (server/), the parser-off
reasoning split (endpoints/) and the simulator (sim/) all read them, so a new SGLang release is one edit here.
"""
