"""Ship chapter 19's runs with the package (annotated_transformer/results/layer_norm_small.json).

    python -m annotated_transformer experiment layer-norm --scale small --seeds 3 --workers 2
    python tools/ship_layer_norm.py runs/experiments-small

Reads the command's `layer-norm.json` in that folder and each run's history.json, and writes every
run's result with its `curves` (chapter 19's `curves`: the loss and gradient norm of every step),
the file chapter 19 reads. Refuses a run that has not finished its steps.
"""

import argparse
import json
from pathlib import Path

from annotated_transformer.helpers.files import atomic_write_text
from annotated_transformer.layer_norm import curves
from annotated_transformer.runs.run_files import read_history

OUT = Path(__file__).resolve().parent.parent / "annotated_transformer" / "results" / "layer_norm_small.json"


def ship(runs_dir: Path, out: Path = OUT) -> list[dict]:
    source = runs_dir / "layer-norm.json"
    if not source.is_file():
        raise SystemExit(f"no {source}: run `python -m annotated_transformer experiment layer-norm "
                         f"--scale small --seeds 3` with its runs in {runs_dir} first")
    records = []
    for result in json.loads(source.read_text(encoding="utf-8")):
        history = read_history(runs_dir / result["run"])
        if not history or history[-1]["step"] != result["steps"]:
            raise SystemExit(f"{runs_dir / result['run']} has not finished its {result['steps']} steps: "
                             "run the experiment again to finish it")
        records.append({**result, "curves": curves(history)})
    atomic_write_text(out, json.dumps(records, indent=None, separators=(",", ":")) + "\n")
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs_dir", type=Path, help="the folder of the experiment's runs")
    records = ship(parser.parse_args().runs_dir)
    print(f"{len(records)} runs written to {OUT}")


if __name__ == "__main__":
    main()
