"""Two decodings of one model, judged over its sentences: the shipped `multi30k` translator (chapter
14's run, `annotated_transformer/pretrained/multi30k/`) on the validation set, beam 4 against greedy
and α = 1.4 against the paper's 0.6 (both beam 4), each decoding's sentences kept so that the rule
can compare them sentence by sentence (`helpers.verdicts.judge_decodings`: sacreBLEU's paired
approximate randomization).

    python experiments/one_model_decodings.py --data-dir DIR   # the 1,014 validation sentences, minutes
    python experiments/one_model_decodings.py --tiny           # the built-in corpus, seconds

The result goes to annotated_transformer/results/multi30k_decodings.json (the tiny mode writes to a
temporary folder): the model, the split, the references, each decoding's settings, hypotheses and
cased BLEU, the verdicts, the hardware, the commit and the command.
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
from small_corpus_levers import commit_of_checkout  # experiments/ is beside this script

from annotated_transformer import Translator, corpus
from annotated_transformer.companions.hardware import describe_hardware
from annotated_transformer.helpers.files import atomic_write_text
from annotated_transformer.helpers.verdicts import judge_decodings
from annotated_transformer.runs.pretrained import pretrained_dir
from annotated_transformer.translator import bleu

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "annotated_transformer" / "results" / "multi30k_decodings.json"
DECODINGS = {"beam 4, alpha 1.4": (4, 1.4), "greedy": (1, 1.4), "beam 4, alpha 0.6": (4, 0.6)}
COMPARISONS = [("beam 4, alpha 1.4", "greedy"), ("beam 4, alpha 1.4", "beam 4, alpha 0.6")]
TINY_SENTENCES = 12


def decode(pairs: list[tuple[str, str]]) -> dict:
    """Each decoding of the shipped model: its settings, hypotheses, cased BLEU and seconds."""
    sources, references = [de for de, _ in pairs], [en for _, en in pairs]
    out = {}
    for name, (beam, alpha) in DECODINGS.items():
        translator = Translator.load(pretrained_dir("multi30k"), beam_size=beam, alpha=alpha)
        started = time.perf_counter()
        hypotheses = translator.translate(sources)
        seconds = time.perf_counter() - started
        score, signature = bleu(hypotheses, references)
        out[name] = {"beam": beam, "alpha": alpha, "bleu": round(score.score, 2), "signature": signature,
                     "seconds": round(seconds, 1), "hypotheses": hypotheses}
        print(f"{name}: BLEU {score.score:.2f} in {seconds:.0f} s", flush=True)
    return out


def verdicts(references: list[str], decodings: dict, trials: int) -> list[dict]:
    """The rule on each comparison of two decodings, over the sentences."""
    rows = []
    for ours, theirs in COMPARISONS:
        verdict = judge_decodings(decodings[ours]["hypotheses"], decodings[theirs]["hypotheses"], references,
                                  trials=trials)
        rows.append({"ours": ours, "theirs": theirs, "verdict": verdict.word,
                     "margin": round(verdict.margin, 2), "p": round(verdict.p, 4), "rule": verdict.rule,
                     "trials": trials})
    return rows


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, help="a folder with the Multi30k files (default: the cache)")
    parser.add_argument("--tiny", action="store_true", help="the built-in corpus's first sentences, seconds")
    parser.add_argument("--out", type=Path,
                        help="the result file (default: the package's; tiny: a temporary one)")
    args = parser.parse_args(argv)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    options = {"root": args.data_dir} if args.data_dir else {}
    pairs = corpus("builtin", "val")[:TINY_SENTENCES] if args.tiny else corpus("multi30k", "val", **options)
    references = [en for _, en in pairs]
    decodings = decode(pairs)
    trials = 200 if args.tiny else 10_000
    result = {
        "model": "pretrained:multi30k (chapter 14's run, its averaged model)",
        "split": "builtin val, first sentences (tiny)" if args.tiny else "multi30k val",
        "references": references,
        "decodings": decodings,
        "verdicts": verdicts(references, decodings, trials),
        "hardware": describe_hardware(torch.device("cpu")),
        "commit": commit_of_checkout(),
        "command": " ".join(["python experiments/one_model_decodings.py",
                             *(sys.argv[1:] if argv is None else argv)]),
    }
    tiny_out = Path(tempfile.mkdtemp(prefix="decodings-tiny-")) / "decodings.json" if args.tiny else None
    out = args.out or tiny_out or OUT
    atomic_write_text(out, json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    for row in result["verdicts"]:
        print(f"{row['ours']} against {row['theirs']}: {row['margin']:+.2f} BLEU, p = {row['p']}: "
              f"{row['verdict']}")
    print(f"summary: {out}")
    return result


if __name__ == "__main__":
    main()
