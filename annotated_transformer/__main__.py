"""The complete command line, `python -m annotated_transformer` (chapter 19 adds its last experiment):
the commands of chapter 16, and the `experiment` command of chapter 18 (`cli.experiment_command`) with the
experiments of chapters 18 and 19."""

import functools
import sys
from collections.abc import Sequence

from annotated_transformer.cli import commands as cli
from annotated_transformer.cli.experiment_command import add_experiment_command
from annotated_transformer.layer_norm import layer_norm_variants
from annotated_transformer.variations import table3_variants

__all__ = ["main"]

_EXPERIMENTS = {"table3": table3_variants, "layer-norm": layer_norm_variants}


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command of the complete command line; errors in the input end it with a message and
    exit status 2."""
    return cli.main(argv, extra_commands=[functools.partial(add_experiment_command, experiments=_EXPERIMENTS)])


if __name__ == "__main__":
    sys.exit(main())
