"""`python -m pipeline.sim [flags]`: the same program as `regen sim`."""

from __future__ import annotations

import argparse
import asyncio

from . import add_arguments, config_from_args, run_forever


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="regen sim", description="Run the SGLang simulator.")
    add_arguments(parser)
    config = config_from_args(parser.parse_args(argv))
    asyncio.run(run_forever(config))


if __name__ == "__main__":
    main()
