"""One run: input rows to prompts, the async engine that turns them into completions, and what a run reports.

`runner.run` wires it together (config → store → gate → reader → dispatcher → validator → store). `reader` and
`batch_lines` turn input rows into prompts and partition them by id; `dispatcher` runs turns, retries, hung requests
and the failure circuit (`circuit`, `deadline`); `gate` admits each endpoint through preflight; `metrics`, `logs`,
`prometheus` and `progress` report; `memory` holds the process's memory knobs; `refusals` refuses a config that
does not read its dataset; `init_config` writes the config `regen init` proposes.
"""
