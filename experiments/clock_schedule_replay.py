"""Why chapter 14's first run of the `multi30k` recipe scored 41.31 on test and the run of the fixed
9,224-step recipe 40.73: the same code, one learning rate apart.

The first run trained under a 30-minute limit with max_steps 10,600: `ClockFit` (chapter 10)
decided at the first step past 20.4 minutes (70% of the time) that the clock allowed about 9,224
steps, and moved the schedule's end there. That step came after step 6,272, where the fixed
schedule's cooldown begins to fall (0.68 × 9,224), because `round(step × 30 / minutes)` is 9,224 only
for a step past 6,272 once minutes ≥ 20.4. So the steps from 6,273 to the decision had the
undecayed rate in the first run, the cooled one in the fixed run: 0.03% apart on one step or a few.

This script replays the first run deterministically: the fixed recipe with max_steps 10,600, and the
schedule's end moved to 9,224 at step DECIDE (the clock's decision, made here without a clock). If the
code computes today what it computed then, the averaged model scores what the first run scored.

    python experiments/clock_schedule_replay.py --data-dir DIR --decide 6273 --out results.json
"""

import argparse
import json
import sys
from pathlib import Path

from annotated_transformer import Translator, corpus, evaluate_bleu, get_recipe, train_translation
from annotated_transformer.files import atomic_write_text
from annotated_transformer.machinery.long_run import ClockFit


def replay_decision(decide: int, last_step: int) -> None:
    """Make ClockFit end the schedule at `last_step` right after step `decide`, as the clock did."""

    def last_step_at(self: ClockFit, minutes: float) -> int | None:
        if self.KEY in self.extra or self.trainer.step != decide:
            return None
        return last_step

    ClockFit.last_step = last_step_at


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--decide", type=int, default=6273, help="the step after which the clock decided")
    parser.add_argument("--last-step", type=int, default=9224)
    parser.add_argument("--planned-steps", type=int, default=10600, help="the first run's max_steps")
    parser.add_argument("--run-dir", type=Path, default=Path("runs/clock-replay"))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    replay_decision(args.decide, args.last_step)
    # A limit no run reaches: ClockFit is active (it needs one), the replayed decision does the rest.
    recipe = get_recipe("multi30k").replace(max_steps=args.planned_steps, max_minutes=1e6)
    options = {"root": args.data_dir}
    run = train_translation(recipe, args.run_dir, corpus_options=options, progress=False)
    translator = Translator.load(run.run_dir)
    scores = {split: evaluate_bleu(translator, corpus(recipe.corpus, split, **options))
              for split in ("val", "test")}
    report = {"decide": args.decide, "last_step": args.last_step, "planned_steps": args.planned_steps,
              "steps": run.steps, "minutes": round(run.minutes, 1), "hardware": run.hardware,
              **{split: round(score.bleu, 2) for split, score in scores.items()},
              "signature": scores["test"].signature}
    atomic_write_text(args.out, json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
