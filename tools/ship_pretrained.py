"""Ship a finished run's translator with the package (annotated_transformer/runs/pretrained.py).

    python tools/ship_pretrained.py RUN_DIR --name multi30k --data-dir DIR --source "the run's command"

Writes annotated_transformer/pretrained/NAME/ (the averaged model with half-precision weights,
vocab.json, recipe.json) and NAME.json: the run's recipe and hardware, the cased sacreBLEU of the
shipped weights on the validation and test sets, as the command line's `evaluate` scores them, the
translations of a few test sentences, and each file's SHA-256. Replace a shipped translator only when
its recipe changes.
"""

import argparse
import json
import sys
from pathlib import Path

from annotated_transformer import Translator, corpus, evaluate_bleu
from annotated_transformer.checkpoints import read_checkpoint, save_checkpoint
from annotated_transformer.helpers.files import atomic_write_text
from annotated_transformer.model import Transformer, TransformerConfig
from annotated_transformer.runs.pretrained import FILES, sha256_of, shipped_root

SAMPLE = 5  # test sentences whose translations the result file keeps (tests/test_pretrained.py)


def ship(run_dir: Path, name: str, data_dir: Path, source: str) -> dict:
    folder = shipped_root() / name
    folder.mkdir(parents=True, exist_ok=True)
    data = read_checkpoint(run_dir / "model.pt")
    model = Transformer(TransformerConfig(**data["config"]))
    model.load_state_dict(data["state"]["model"])
    # Half precision on disk: the weights are rounded once, and computed with in float32 after loading.
    save_checkpoint(folder / "model.pt", model.half(), step=data["state"]["step"], extra=data["extra"])
    for file in ("vocab.json", "recipe.json"):
        atomic_write_text(folder / file, (run_dir / file).read_text(encoding="utf-8"))
    translator = Translator.load(folder, device="cpu")
    scores = {split: evaluate_bleu(translator, corpus("multi30k", split, root=data_dir))
              for split in ("val", "test")}
    full = Translator.load(run_dir, device="cpu")  # the run's own float32 weights, for comparison
    full_scores = {split: round(evaluate_bleu(full, corpus("multi30k", split, root=data_dir)).bleu, 2)
                   for split in ("val", "test")}
    test = corpus("multi30k", "test", root=data_dir)[:SAMPLE]
    report = {
        "name": name,
        "recipe": json.loads((run_dir / "recipe.json").read_text(encoding="utf-8")).get("name"),
        "source": source,
        "steps": data["state"]["step"],
        "averaged": data["extra"].get("averaged"),
        "hardware": json.loads((run_dir / "hardware.json").read_text(encoding="utf-8")),
        "weights": "float16 on disk, float32 when loaded",
        "parameters": sum(p.numel() for p in translator.model.parameters()),
        "size_bytes": (folder / "model.pt").stat().st_size,
        "val": round(scores["val"].bleu, 2),
        "test": round(scores["test"].bleu, 2),
        "test_lowercased": round(scores["test"].bleu_lowercase, 2),
        "signature": scores["test"].signature,
        "float32_run_model": full_scores,
        "decoding": {"beam_size": translator.beam_size, "alpha": translator.alpha},
        "translations": [{"source": source, "translation": translator.translate(source), "reference": ref}
                         for source, ref in test],
        "sha256": {file: sha256_of(folder / file) for file in FILES},
        "command": f"python tools/ship_pretrained.py RUN_DIR --name {name} --data-dir DIR --source ...",
    }
    text = json.dumps(report, indent=1, ensure_ascii=False) + "\n"
    atomic_write_text(shipped_root() / f"{name}.json", text)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--name", default="multi30k")
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--source", required=True, help="the run's command, for the result file")
    args = parser.parse_args()
    report = ship(args.run_dir, args.name, args.data_dir, args.source)
    print(json.dumps({k: v for k, v in report.items() if k != "translations"}, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
