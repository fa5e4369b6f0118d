"""One run: input rows to prompts, the async engine that turns them into completions, and what a run reports.

`runner.run` wires it together (config → store → gate → reader → dispatcher → validator → store); the reader that
turns input rows into prompts is `pipeline.inputs.reader`, the run's endpoints are `pipeline.endpoints.fleet`'s.
`dispatcher` runs turns, retries, hung requests and the failure circuit (`circuit`, `deadline`); `commits` says when
finished rows are made durable; `gate` admits each endpoint through preflight; `metrics`, `ticker`, `logs`,
`prometheus` and `progress` report; `shutdown` stops a run on a signal and drains it; `memory` holds the process's
memory knobs; `refusals` refuses a config that does not read its dataset; `init_config` writes the config
`regen init` proposes.
"""
