"""Notebook 05's GRPO run as a script: one process with unsloth, or several under accelerate.

    python -m scripts.train_grpo --profile smoke --max-steps 5          # CPU, ~1 min
    python -m scripts.train_grpo --profile t4                          # one GPU, as on Colab
    accelerate launch --config_file configs/accelerate/ddp.yaml --num_processes 4 \\
        -m scripts.train_grpo --profile large                          # 4 GPUs (GPU only)
    accelerate launch --num_processes 2 --cpu -m scripts.train_grpo --profile smoke --max-steps 3

Run it from the repository's root, as a module: `helpers` is then importable without installing.

Same data, rewards, profile, GRPOConfig, checkpoints, log and figures as notebook 05 (all from
`helpers`). What changes with several processes is decided in one place, `plan_run`: unsloth
trains on one device only, so several processes load the model with transformers + peft.

The trainer is assembled by `helpers.grpo_run.build_trainer`, with notebook 05's callbacks (held-out
accuracy, live figure, adapter checkpoints, step timer, completion samples). For the crash tests
(tests/test_faults.py, scripts/fault_soak.py) tools/faults.py plugs in through one hook, only
when $GRPO_FAULT_DIR or --debug-dump-params asks for it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

# These import torch at most: `import unsloth` must still come before trl/transformers/peft.
from helpers.grpo_config import describe_batch, explain_config, make_grpo_config
from helpers.hardware import Hardware
from helpers.launch import Plan, load_model, plan_run, world_size_from_env, zero3_requested
from helpers.paths import shown
from helpers.profiles import PROFILES, Profile, TrainingConfigError
from helpers.run_folder import RunFolder, run_dir
from helpers.storage import RunFolderError, check_writable
from scripts._cli import OneLineParser, positive_float, positive_int

if TYPE_CHECKING:
    from trl import GRPOConfig


def build_parser() -> OneLineParser:
    """The command line: profile, model, steps, output folder, resume, and the scale-up knobs."""
    parser = OneLineParser(
        prog="train_grpo.py",
        description="GRPO on GSM8K, as notebook 05 runs it. Run it with python for one process, "
        "or with `accelerate launch` for several (see notebooks/10_scaling_up.ipynb).",
    )
    parser.add_argument(
        "--profile", choices=sorted(PROFILES), default=None,
        help="sizes and knobs (helpers/profiles.py); default: $GRPO_PROFILE, else the hardware's",
    )
    parser.add_argument(
        "--model", default=None,
        help="a hub id or local folder instead of the profile's model (e.g. a bigger one)",
    )
    parser.add_argument(
        "--max-steps", type=positive_int, default=None,
        help="optimizer steps; default: the profile's max_steps",
    )
    parser.add_argument(
        "--learning-rate", type=positive_float, default=None,
        help="instead of the course's (notebook 05 section 7 shows a run with one 10x too high)",
    )
    parser.add_argument(
        "--output-dir", type=Path, default=None,
        help="the run folder (checkpoints/, adapter/, log_history.json, figures/); "
        "default: runs/course/<profile>, or $GRPO_RUN_DIR/<profile>",
    )
    parser.add_argument(
        "--resume", action=argparse.BooleanOptionalAction, default=True,
        help="continue from the newest checkpoint in OUTPUT_DIR/checkpoints (default); "
        "--no-resume deletes those checkpoints and starts again at step 1",
    )
    parser.add_argument(
        "--vllm-server-host", default=None,
        help="generate with a `trl vllm-serve` server on this host (vllm_mode='server'; GPU only)",
    )
    parser.add_argument("--vllm-server-port", type=positive_int, default=8000)
    parser.add_argument(
        "--debug-dump-params", type=Path, default=None, metavar="DIR",
        help="(tests) each rank writes DIR/rank<N>.json: checksums of the LoRA weights and "
        "gradients at every step, and what its reward function scored",
    )
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line (sys.argv when argv is None)."""
    return build_parser().parse_args(argv)


def with_model(profile: Profile, model: str | None) -> Profile:
    """The profile, with --model in place of its model when given."""
    return profile if model is None else replace(profile, model_name=model)


def output_dir(args: argparse.Namespace, profile: Profile) -> RunFolder:
    """The run folder: --output-dir, else the one notebooks 05-07 share."""
    return RunFolder(args.output_dir) if args.output_dir is not None else run_dir(profile.name)


def config_overrides(args: argparse.Namespace, plan: Plan) -> dict[str, Any]:
    """GRPOConfig settings beyond the profile's: empty for a plain one-process run."""
    overrides: dict[str, Any] = {}
    if args.max_steps is not None:
        overrides["max_steps"] = args.max_steps
    if args.learning_rate is not None:
        overrides["learning_rate"] = args.learning_rate
    if plan.world_size > 1:
        # Every LoRA weight gets a gradient each step: DDP need not search the graph for unused
        # ones (that search also clashes with gradient checkpointing's second forward pass).
        overrides["ddp_find_unused_parameters"] = False
    if args.vllm_server_host is not None:
        overrides.update(
            use_vllm=True, vllm_mode="server",
            vllm_server_host=args.vllm_server_host, vllm_server_port=args.vllm_server_port,
        )
    return overrides


def build_config(
    args: argparse.Namespace, hw: Hardware, profile: Profile, plan: Plan
) -> GRPOConfig:
    """The GRPOConfig: make_grpo_config (helpers.grpo_config), as notebook 05's, + overrides."""
    checkpoints = output_dir(args, profile).checkpoints
    return make_grpo_config(profile, hw, checkpoints, **config_overrides(args, plan))


def save_outputs(trainer: Any, tokenizer: Any, run: RunFolder) -> None:
    """The figure, adapter and log notebook 05 saves, written by the main process."""
    from helpers.health import print_health_check
    from helpers.plotting import save_figure
    from helpers.resume import save_adapter, save_log_history

    plugin = trainer.accelerator.state.deepspeed_plugin
    zero3 = trainer.is_deepspeed_enabled and plugin.zero_stage == 3
    if zero3:
        trainer.save_model(str(run.adapter))  # every rank: gathers the sharded LoRA weights
    if not trainer.accelerator.is_main_process:
        return
    log = trainer.state.log_history
    print_health_check(log)
    print(f"Figure : {shown(save_figure(log, run.figure))}")
    if zero3:
        tokenizer.save_pretrained(str(run.adapter))
        print(f"Adapter: {shown(run.adapter)}")
    else:
        state = trainer.state
        adapter = save_adapter(trainer.model, tokenizer, run, state.global_step, state.max_steps)
        print(f"Adapter: {shown(adapter)}")
    print(f"Log    : {shown(save_log_history(log, run))}")


def cli(argv: Sequence[str] | None = None) -> int:
    """`main` for the command line: a run folder or setting that cannot work is one line, exit 1."""
    try:
        return main(argv)
    except (RunFolderError, TrainingConfigError) as error:
        print(f"train_grpo.py: error: {error}", file=sys.stderr)
        return 1


def instrument(args: argparse.Namespace, rank: int, world_size: int) -> Any:
    """The test harness (tools/faults.py), only when a test asks for it; None for a real run."""
    if not os.environ.get("GRPO_FAULT_DIR") and args.debug_dump_params is None:
        return None
    from tools.faults import instrument_from_env

    return instrument_from_env(os.environ, rank, world_size, args.debug_dump_params)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, plan, load, build the trainer, train (or resume), and save what notebook 05 saves."""
    args = parse_args(argv)
    from helpers.session import start

    hw, profile = start(args.profile)  # also: one torch thread on a CPU
    profile = with_model(profile, args.model)
    plan = plan_run(profile, world_size_from_env(), args.vllm_server_host is not None)
    plan.import_backend()  # unsloth first, when the plan picks it
    from accelerate import PartialState

    state = PartialState()  # joins the process group under `accelerate launch`
    run = output_dir(args, profile)
    config = build_config(args, hw, profile, plan)  # its TrainingArguments join the processes
    if state.is_main_process:
        print(f"Backend: {plan.backend} ({plan.why})")
        print(describe_batch(config, plan.world_size))
        print(explain_config(config))
    extras = instrument(args, state.process_index, plan.world_size)  # each rank knows its index
    if state.is_main_process:
        check_writable(run.root)  # before minutes of loading, not at the first checkpoint
        print(f"Run    : {shown(run)}")
        if not args.resume:
            shutil.rmtree(config.output_dir, ignore_errors=True)
    state.wait_for_everyone()
    from helpers.data import grpo_train_dataset
    from helpers.grpo_run import build_trainer
    from helpers.resume import train_or_resume

    with state.main_process_first():  # the first process builds/downloads; the others reuse
        model, tokenizer = load_model(profile, hw, plan)
        dataset = grpo_train_dataset(profile, tokenizer)
    trainer = build_trainer(
        model, tokenizer, config, profile, run, train_dataset=dataset, instrument=extras,
        writer=state.is_main_process,  # one writer for the figure, log and samples
        samples=state.is_main_process,
        heldout=plan.world_size == 1,  # one process of several cannot generate alone
        adapter=not zero3_requested(os.environ),  # ZeRO-3: save_outputs gathers it at the end
    )
    train_or_resume(trainer)
    save_outputs(trainer, tokenizer, run)
    return 0


if __name__ == "__main__":
    raise SystemExit(cli())
