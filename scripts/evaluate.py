"""Notebook 06's held-out evaluation from the command line: base vs trained, same prompts,
same decoding, same scoring (all from helpers.evaluation).

    python -m scripts.evaluate --profile t4                      # the run's adapter, as notebook 06
    python -m scripts.evaluate --profile large --adapter runs/big/large/adapter
    python -m scripts.evaluate --profile large --merged exports/merged_16bit

With --adapter (default: the profile's run folder), the base model is the trained one with its
LoRA switched off, exactly as in notebook 05. With --merged, the merged model is the "trained"
side and the profile's base model, loaded next to it with plain transformers, the "base" side
(in float16 on a T4, which has no bf16; elsewhere in the dtype the models were saved in).
Results go to OUTPUT_DIR/results.json and problems.csv, compared with any previous results there.
Run it from the course's root.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from helpers.profiles import PROFILES
from scripts._cli import OneLineParser

if TYPE_CHECKING:
    from helpers.evaluation import DecodingSettings, Generation
    from helpers.hardware import Hardware
    from helpers.profiles import Profile


def existing_dir(text: str) -> Path:
    """An argparse type: a folder that exists."""
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"no folder at {text!r}")
    return path


def build_parser() -> OneLineParser:
    """The command line: which model to evaluate, on how many problems, with what decoding."""
    parser = OneLineParser(
        prog="python -m scripts.evaluate",
        description="Held-out GSM8K accuracy, base vs trained, as notebook 06 measures it.",
    )
    parser.add_argument(
        "--profile", choices=sorted(PROFILES), default=None,
        help="sizes and data (helpers/profiles.py); default: $GRPO_PROFILE, else the hardware's",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--adapter", type=existing_dir, default=None,
        help="a saved LoRA adapter folder; default: the profile's run folder's adapter/",
    )
    source.add_argument(
        "--merged", type=existing_dir, default=None,
        help="a merged model folder (helpers.export.merge_to_16bit), compared with the base",
    )
    parser.add_argument(
        "--num-problems", type=int, default=None,
        help="held-out problems; default: the profile's num_eval_problems",
    )
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default)")
    parser.add_argument("--num-samples", type=int, default=1, help="k > 1 also reports pass@k")
    parser.add_argument(
        "--output-dir", type=Path, default=None,
        help="the run folder whose eval/ receives the results; default: the folder that holds "
        "the model folder",
    )
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line (sys.argv when argv is None)."""
    return build_parser().parse_args(argv)


def load_merged(profile: Profile, merged_dir: Path, hw: Hardware) -> tuple[Any, Any, Any]:
    """The merged model, the profile's base model and the merged tokenizer: plain transformers,
    in float16 on a T4 (a 16-bit merge saved as bf16 elsewhere would not run there), else as
    saved (helpers.export.merged_dtype; transformers 4.56.2 takes the dtype's name,
    modeling_utils.py:1347-1367)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from helpers.export import merged_dtype
    from helpers.loading import resolve_model_name

    tokenizer = AutoTokenizer.from_pretrained(merged_dir)
    load = {"dtype": merged_dtype(hw), **({"device_map": "auto"} if hw.cuda else {})}
    merged = AutoModelForCausalLM.from_pretrained(merged_dir, **load)
    base = AutoModelForCausalLM.from_pretrained(resolve_model_name(profile), **load)
    return base.eval(), merged.eval(), tokenizer


def two_model_generate(base: Any, merged: Any) -> Any:
    """An `evaluate(generate=...)` that answers 'base' with one model and 'trained' with another."""
    from helpers.evaluation import SIDES, generate_hf

    def generate(
        model: Any, tokenizer: Any, prompts: Sequence[str], settings: DecodingSettings,
        side: str, adapter_dir: Path,
    ) -> list[list[Generation]]:
        if side not in SIDES:
            raise ValueError(f"side must be one of {SIDES}, got {side!r}")
        chosen = merged if side == "trained" else base
        return generate_hf(chosen, tokenizer, prompts, settings, desc=side)

    return generate


def main(argv: Sequence[str] | None = None) -> int:
    """Load, evaluate both sides, save, and print the table notebook 06 shows."""
    args = parse_args(argv)
    from helpers.session import start

    hw, profile = start(args.profile)
    if args.merged is None:
        import unsloth  # noqa: F401  (before transformers and peft, as in notebook 06)

    from helpers.data import load_gsm8k
    from helpers.evaluation import (
        compare_runs,
        decoding_settings,
        evaluate,
        gains,
        load_results,
        markdown_table,
        require_adapter,
        save_results,
        summary_table,
    )
    from helpers.run_folder import RunFolder, run_dir

    settings = decoding_settings(
        profile, temperature=args.temperature, num_samples=args.num_samples
    )
    problems = list(load_gsm8k("test", profile, limit=args.num_problems))
    if args.merged is None:
        from helpers.loading import load_trained

        adapter = args.adapter or require_adapter(run_dir(profile.name))
        model, tokenizer = load_trained(profile, adapter)
        results = evaluate(model, tokenizer, problems, settings, adapter)
        source = adapter
    else:
        base, merged, tokenizer = load_merged(profile, args.merged, hw)
        generate = two_model_generate(base, merged)
        results = evaluate(merged, tokenizer, problems, settings, args.merged, generate=generate)
        source = args.merged
    run = RunFolder(args.output_dir or source.parent)
    previous = load_results(run)
    json_path, csv_path = save_results(results, run)
    print(markdown_table(summary_table(results)))
    gain = gains(results)
    print(f"gain in points: strict {gain['strict']:+.1f}, lenient {gain['lenient']:+.1f}, "
          f"format {gain['format']:+.1f}")
    print(compare_runs(previous, results))
    print(f"saved: {json_path} and {csv_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
