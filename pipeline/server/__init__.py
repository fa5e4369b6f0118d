"""What regen knows about SGLang servers it talks to or starts: preflight and launching.

`preflight` asks each endpoint whether it is the server the config says (over `control`, with a live `probe`) and
`checks` judges the answers; `server_args` maps `[expect]` keys and launch flags to `/server_info` keys per version;
`drift_hints` says why a server reports another value than asked for; `launch_rules` words advice on the refusals
and silent changes `pipeline.sglang.resolution` finds in a launch, and `launch` starts SGLang. The release facts
they rest on are `pipeline.sglang`'s.
"""
