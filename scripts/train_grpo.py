"""Notebook 05's GRPO run as a script: one process with unsloth, or several under accelerate.

    python scripts/train_grpo.py --profile smoke --max-steps 5            # CPU, ~1 min
    python scripts/train_grpo.py --profile t4                            # one GPU, as on Colab
    accelerate launch --config_file configs/accelerate/ddp.yaml --num_processes 4 \\
        scripts/train_grpo.py --profile large                            # 4 GPUs (GPU only)
    accelerate launch --num_processes 2 --cpu scripts/train_grpo.py --profile smoke --max-steps 3

Same data, rewards, profile, GRPOConfig, checkpoints, log and figures as notebook 05 (all from
`helpers`). What changes with several processes is decided in one place, `plan_run`: unsloth
trains on one device only, so several processes load the model with transformers + peft.

For the fault-injection tests (tests/test_faults.py, scripts/fault_soak.py) the run can stop at a
named point (FAULT_POINTS) and wait there to be killed; that is off unless $GRPO_FAULT_DIR is set.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `helpers` without installing the course

# These import torch at most: `import unsloth` must still come before trl/transformers/peft.
from helpers.hardware import Hardware, choose_precision  # noqa: E402
from helpers.paths import (  # noqa: E402
    RunFolderError,
    add_fault_hook,
    check_writable,
    fault_point,
    run_dir,
    shown,
    write_json_atomic,
)
from helpers.profiles import PROFILES, Profile  # noqa: E402
from helpers.training import TrainingConfigError, describe_batch  # noqa: E402

if TYPE_CHECKING:
    from trl import GRPOConfig

Backend = Literal["unsloth", "peft"]


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag is reported on one line (argparse prints usage + error: two)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


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


@dataclass(frozen=True)
class Plan:
    """How this process trains: which library loads the model, and whether the base is 4-bit."""

    backend: Backend
    load_in_4bit: bool
    world_size: int
    why: str


def plan_run(world_size: int, vllm_server: bool) -> Plan:
    """The one place that picks unsloth or transformers + peft, and 4-bit or 16-bit weights."""
    if world_size == 1 and not vllm_server:
        return Plan("unsloth", True, 1, "one process: unsloth, exactly as notebook 05")
    if vllm_server:
        return Plan(
            "peft", False, world_size,
            "vLLM server mode: trl merges LoRA into the base and sends the weights to the "
            "server, which needs 16-bit weights, not packed 4-bit ones; unsloth does not do "
            "server mode, so transformers + peft load a 16-bit base",
        )
    return Plan(
        "peft", True, world_size,
        f"{world_size} processes: unsloth trains on one device only, so transformers + peft "
        "load the same 4-bit base (bitsandbytes NF4, on CPU too) and the same LoRA settings",
    )


def check_server_model(profile: Profile, vllm_server: bool) -> str | None:
    """Why this model cannot be used with a vLLM server (None when it can)."""
    if vllm_server and "bnb-4bit" in profile.model_name:
        return (
            f"--vllm-server-host needs a 16-bit model that vLLM serves too, not "
            f"{profile.model_name}: download the 16-bit one (huggingface-cli download "
            "<id> --local-dir DIR) and pass --model DIR here and to `trl vllm-serve --model`"
        )
    return None


def world_size_from_env() -> int:
    """How many processes `accelerate launch` (or torchrun) started; 1 under plain python."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def with_model(profile: Profile, model: str | None) -> Profile:
    """The profile, with --model in place of its model when given."""
    return profile if model is None else replace(profile, model_name=model)


def output_dir(args: argparse.Namespace, profile: Profile) -> Path:
    """The run folder: --output-dir, else the one notebooks 05-07 share."""
    return args.output_dir if args.output_dir is not None else run_dir(profile.name)


def config_overrides(args: argparse.Namespace, plan: Plan) -> dict[str, Any]:
    """GRPOConfig settings beyond the profile's: empty for a plain one-process run."""
    overrides: dict[str, Any] = {}
    if args.max_steps is not None:
        overrides["max_steps"] = args.max_steps
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
    args: argparse.Namespace, hw: Hardware, profile: Profile, plan: Plan | None = None
) -> GRPOConfig:
    """The GRPOConfig: helpers.training.make_grpo_config, as notebook 05 calls it, + overrides."""
    from helpers.training import checkpoint_dir, make_grpo_config

    plan = plan or plan_run(1, args.vllm_server_host is not None)
    checkpoints = checkpoint_dir(output_dir(args, profile))
    return make_grpo_config(profile, hw, checkpoints, **config_overrides(args, plan))


def load_unsloth(profile: Profile) -> tuple[Any, Any]:
    """Notebook 01's two unsloth calls."""
    from unsloth import FastLanguageModel

    from helpers.model import load_kwargs, lora_kwargs

    model, tokenizer = FastLanguageModel.from_pretrained(**load_kwargs(profile))
    return FastLanguageModel.get_peft_model(model, **lora_kwargs(profile)), tokenizer


BNB_4BIT_SUFFIXES = ("-unsloth-bnb-4bit", "-bnb-4bit")  # unsloth's pre-quantized repos


def zero3_requested(env: Mapping[str, str]) -> bool:
    """True under `accelerate launch` with DeepSpeed ZeRO stage 3 (by flag or JSON config)."""
    if env.get("ACCELERATE_USE_DEEPSPEED", "false").lower() != "true":
        return False
    if env.get("ACCELERATE_DEEPSPEED_ZERO_STAGE"):
        return env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == "3"
    config = env.get("ACCELERATE_DEEPSPEED_CONFIG_FILE")
    if not config:
        return False
    return json.loads(Path(config).read_text()).get("zero_optimization", {}).get("stage") == 3


def zero3_base(model_name: str) -> str:
    """The 16-bit model that ZeRO-3 quantizes on load: a `-bnb-4bit` id without its suffix.

    For a pre-quantized checkpoint transformers ignores the BitsAndBytesConfig passed in and
    keeps its packed uint8 storage, so `bnb_4bit_quant_storage` (which lets ZeRO-3 shard 4-bit
    weights like the others) applies only to weights quantized on load.
    """
    for suffix in BNB_4BIT_SUFFIXES:
        if model_name.endswith(suffix):
            return model_name.removesuffix(suffix)
    config = Path(model_name) / "config.json"
    if config.is_file() and "quantization_config" in json.loads(config.read_text()):
        raise ValueError(
            f"ZeRO-3 quantizes the model on load, but {model_name} is already quantized: pass "
            "--model with the 16-bit model's folder or hub id instead."
        )
    return model_name


def load_peft(profile: Profile, hw: Hardware, load_in_4bit: bool) -> tuple[Any, Any]:
    """The same base and LoRA settings (helpers.model) through transformers + peft."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig

    from helpers.model import load_kwargs, lora_kwargs

    load, lora = load_kwargs(profile), lora_kwargs(profile)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[
        choose_precision(hw)
    ]
    quantization = None
    if load_in_4bit:
        quantization = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=dtype,
            bnb_4bit_quant_storage=dtype,  # lets ZeRO-3 shard the packed weights like others
        )
    name = load["model_name"]
    if load_in_4bit and zero3_requested(os.environ):
        name = zero3_base(name)
        print(f"ZeRO-3: quantizing {name} on load, so that bnb_4bit_quant_storage applies")
    # No device_map: accelerate has already picked this process's GPU (bitsandbytes loads
    # there); DeepSpeed places the weights itself.
    model = AutoModelForCausalLM.from_pretrained(
        name, dtype=dtype, quantization_config=quantization
    )
    tokenizer = AutoTokenizer.from_pretrained(name)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    torch.manual_seed(lora["random_state"])  # same LoRA init on every rank, as unsloth seeds it
    adapter = LoraConfig(
        r=lora["r"], lora_alpha=lora["lora_alpha"], target_modules=lora["target_modules"],
        lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
    )
    return get_peft_model(model, adapter), tokenizer


def load_model(profile: Profile, hw: Hardware, plan: Plan) -> tuple[Any, Any]:
    """Model with LoRA, and tokenizer, through the library the plan names."""
    if plan.backend == "unsloth":
        return load_unsloth(profile)
    return load_peft(profile, hw, plan.load_in_4bit)


def checksum(tensors: dict[str, Any]) -> str:
    """sha256 of tensors' bytes, in name order: equal only if every value is bit-identical."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        digest.update(name.encode())
        digest.update(tensors[name].detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def observed(func: Callable[..., list[float]], seen: list[dict[str, Any]]) -> Callable:
    """`func`, unchanged, that also notes what this process scored (same __name__ for trl)."""

    @functools.wraps(func)
    def wrapper(completions: Sequence[Any], **kwargs: Any) -> list[float]:
        seen.append({"completions": len(completions), "answers": list(kwargs.get("answer", []))})
        return func(completions, **kwargs)

    return wrapper


def param_dump_callback(folder: Path, rank: int, world_size: int, seen: list[dict]) -> Any:
    """A TrainerCallback writing this rank's weight/gradient checksums to folder/rank<N>.json."""
    from transformers import TrainerCallback

    def trainable(model: Any, grads: bool) -> dict[str, Any]:
        return {
            n: (p.grad if grads else p) for n, p in model.named_parameters()
            if p.requires_grad and (p.grad is not None or not grads)
        }

    class ParamDump(TrainerCallback):
        """Rewritten after every step, so a run killed mid-way leaves the steps it finished."""

        def __init__(self) -> None:
            self.record: dict[str, Any] = {
                "rank": rank, "world_size": world_size, "pid": os.getpid(), "steps": [],
                "scored": seen,
            }

        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                           **kwargs: Any) -> None:
            from accelerate import PartialState

            self.record["start_step"] = state.global_step  # > 0 after a resume
            state = PartialState()
            self.record.update(backend=state.backend, distributed_type=str(state.distributed_type))
            self.record["initial_params"] = checksum(trainable(model, grads=False))
            self.record["config"] = {
                k: getattr(args, k) for k in (
                    "per_device_train_batch_size", "gradient_accumulation_steps",
                    "num_generations", "generation_batch_size", "steps_per_generation",
                )
            }

        def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, model: Any = None,
                                  **kwargs: Any) -> None:
            grads = trainable(model, grads=True)  # after DDP's all-reduce: the averaged ones
            self.record["steps"].append({
                "grads": checksum(grads),
                "grad_abs_sum": float(sum(g.abs().sum() for g in grads.values())),
            })

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None,
                        **kwargs: Any) -> None:
            step = self.record["steps"][-1]
            step.update(step=state.global_step, params=checksum(trainable(model, grads=False)))
            write_json_atomic(folder / f"rank{rank}.json", self.record)

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            write_json_atomic(folder / f"rank{rank}.json", self.record)

    return ParamDump()


# ---- fault injection: named points where a test stops the run (off without $GRPO_FAULT_DIR) ----

FAULT_POINTS = (
    "step",  # mid-step: completions generated, being scored (inside the first reward function)
    "save:model-written",  # checkpoint-N holds the model and tokenizer only
    "save:optimizer-written",  # ... and optimizer.pt, scheduler.pt
    "save:before-trainer-state",  # ... and rng_state.pth: everything but trainer_state.json
    "adapter-swap",  # run/adapter renamed to adapter.old/, the new one not yet in place
    "log-history",  # log_history.json.partial written, not yet renamed over log_history.json
    "after-save",  # right after a whole save: checkpoint, log and adapter
)
DISK_FULL_BYTES = 256 * 1024  # "disk-full": any later write past this size fails halfway
PAUSE_LIMIT_SECONDS = 600  # a paused run exits by itself after this, or when its parent dies


@dataclass(frozen=True)
class FaultPlan:
    """$GRPO_FAULT_DIR (markers, journal), $GRPO_FAULT_AT ('point@step'), $GRPO_FAULT_ACTION."""

    folder: Path
    point: str | None
    step: int | None
    action: str  # "pause": write reached-<rank>.json and wait to be killed; or "disk-full"


def fault_plan(env: Mapping[str, str]) -> FaultPlan | None:
    """The fault a test asked for in the environment, or None (a normal run)."""
    if not env.get("GRPO_FAULT_DIR"):
        return None
    point, _, step = env.get("GRPO_FAULT_AT", "").partition("@")
    action = env.get("GRPO_FAULT_ACTION", "pause")
    if point and point not in FAULT_POINTS and not point.startswith(("eval:", "export:")):
        raise ValueError(f"Unknown fault point {point!r}: use one of {', '.join(FAULT_POINTS)}.")
    return FaultPlan(Path(env["GRPO_FAULT_DIR"]), point or None, int(step) if step else None,
                     action)


def fault_hook(plan: FaultPlan, rank: int) -> Callable[[str, int | None], None]:
    """What happens at a fault point: nothing, unless it is the planned one."""

    def hook(point: str, step: int | None) -> None:
        if point != plan.point or (plan.step is not None and step != plan.step):
            return
        if plan.action == "disk-full":  # a real write failure, part of the file on disk
            import resource  # Unix only, like the fault tests
            import signal

            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # so write() fails with EFBIG instead
            resource.setrlimit(resource.RLIMIT_FSIZE, (DISK_FULL_BYTES, resource.RLIM_INFINITY))
            return
        reached = {"point": point, "step": step, "pid": os.getpid(), "rank": rank}
        parent = os.getppid()
        write_json_atomic(plan.folder / f"reached-{rank}.json", reached)
        print(f"[fault] paused at {point} (step {step}), waiting to be killed", flush=True)
        for _ in range(PAUSE_LIMIT_SECONDS * 5):  # never outlive the test that paused it
            if os.getppid() != parent:
                break
            time.sleep(0.2)
        os._exit(3)

    return hook


def paused_mid_step(func: Callable) -> Callable:
    """`func` (a reward function), with the 'step' fault point before it (same __name__)."""

    @functools.wraps(func)
    def wrapper(completions: Sequence[Any], **kwargs: Any) -> list[float]:
        state = kwargs.get("trainer_state")
        fault_point("step", state.global_step + 1 if state is not None else None)
        return func(completions, **kwargs)

    return wrapper


def mark_save_phases(trainer: Any) -> None:
    """Fault points between the phases of transformers' Trainer._save_checkpoint (4.56.2)."""

    def around(name: str, before: str | None, after: str | None) -> None:
        original = getattr(trainer, name)

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if before:
                fault_point(before, trainer.state.global_step)
            result = original(*args, **kwargs)
            if after:
                fault_point(after, trainer.state.global_step)
            return result

        setattr(trainer, name, wrapper)

    around("_save_optimizer_and_scheduler", "save:model-written", "save:optimizer-written")
    around("_save_rng_state", None, "save:before-trainer-state")


def fault_journal(folder: Path, rank: int) -> Any:
    """A TrainerCallback appending each trained step (and its weights' checksum) to a journal,
    and marking the 'after-save' point."""
    from transformers import TrainerCallback

    def note(**entry: Any) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / f"journal-{rank}.jsonl").open("a") as f:
            f.write(json.dumps({"pid": os.getpid(), **entry}) + "\n")

    class Journal(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            note(event="start", step=state.global_step)

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None,
                        **kwargs: Any) -> None:
            params = {n: p for n, p in model.named_parameters() if p.requires_grad}
            note(event="step", step=state.global_step, params=checksum(params))

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            fault_point("after-save", state.global_step)

    return Journal()


def save_outputs(trainer: Any, tokenizer: Any, run: Path) -> None:
    """The figure, adapter and log_history.json notebook 05 saves, written by the main process."""
    from helpers.plotting import print_health_check, save_figure
    from helpers.training import save_adapter, save_log_history

    plugin = trainer.accelerator.state.deepspeed_plugin
    zero3 = trainer.is_deepspeed_enabled and plugin.zero_stage == 3
    if zero3:
        trainer.save_model(str(run / "adapter"))  # every rank: gathers the sharded LoRA weights
    if not trainer.accelerator.is_main_process:
        return
    log = trainer.state.log_history
    print_health_check(log)
    print(f"Figure : {shown(save_figure(log, run / 'figures' / 'training.png'))}")
    if zero3:
        tokenizer.save_pretrained(str(run / "adapter"))
        print(f"Adapter: {shown(run / 'adapter')}")
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


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, plan, load, train (or resume), and save what notebook 05 saves."""
    args = parse_args(argv)
    from helpers.session import start

    hw, profile = start(args.profile)
    profile = with_model(profile, args.model)
    problem = check_server_model(profile, args.vllm_server_host is not None)
    if problem:
        build_parser().error(problem)
    plan = plan_run(world_size_from_env(), args.vllm_server_host is not None)
    if plan.backend == "unsloth":
        import unsloth  # noqa: F401  (before trl, transformers and peft: it patches them)
    from accelerate import PartialState

    state = PartialState()  # joins the process group under `accelerate launch`
    faults = fault_plan(os.environ)
    if faults is not None:
        add_fault_hook(fault_hook(faults, state.process_index))
    run = output_dir(args, profile)
    config = build_config(args, hw, profile, plan)
    if state.is_main_process:
        from helpers.training import explain_config

        check_writable(run)  # before minutes of loading, not at the first checkpoint

        print(f"Backend: {plan.backend} ({plan.why})")
        print(describe_batch(config, plan.world_size))
        print(f"Run    : {shown(run)}")
        print(explain_config(config))
    if not args.resume and state.is_main_process:
        shutil.rmtree(config.output_dir, ignore_errors=True)
    state.wait_for_everyone()
    from helpers.data import grpo_train_dataset
    from helpers.hardware import use_one_cpu_thread

    use_one_cpu_thread(hw)
    with state.main_process_first():  # the first process builds/downloads; the others reuse
        model, tokenizer = load_model(profile, hw, plan)
        dataset = grpo_train_dataset(profile, tokenizer)

    from trl import GRPOTrainer

    from helpers.callbacks import AdapterCheckpoint, StepTimer
    from helpers.plotting import CompletionSampler, LivePlot
    from helpers.rewards import REWARD_FUNCS
    from helpers.training import train_or_resume

    seen: list[dict[str, Any]] = []
    rewards = list(REWARD_FUNCS)
    callbacks: list[Any] = []
    if state.is_main_process:  # one writer for the figure, log and samples (notebook 05's)
        callbacks.append(LivePlot(run, every=max(1, config.max_steps // 10)))
        callbacks.append(StepTimer(every_seconds=60))
    if not zero3_requested(os.environ):  # ZeRO-3 shards the LoRA: save_outputs gathers it at last
        callbacks.append(AdapterCheckpoint(run, tokenizer))
    if args.debug_dump_params is not None:
        rewards[0] = observed(rewards[0], seen)
        callbacks.append(
            param_dump_callback(args.debug_dump_params, state.process_index, plan.world_size, seen)
        )
    if faults is not None:
        rewards[0] = paused_mid_step(rewards[0])
        callbacks.append(fault_journal(faults.folder, state.process_index))
    trainer = GRPOTrainer(
        model=model, processing_class=tokenizer, reward_funcs=rewards, args=config,
        train_dataset=dataset, callbacks=callbacks,
    )
    if state.is_main_process:
        trainer.add_callback(CompletionSampler(trainer, run, every=max(1, config.max_steps // 3)))
    if faults is not None:
        mark_save_phases(trainer)
    train_or_resume(trainer)
    save_outputs(trainer, tokenizer, run)
    return 0


if __name__ == "__main__":
    raise SystemExit(cli())
