"""Kill 05's training, 06's evaluation and 07's merge anywhere; resume; check that nothing is lost.

    python -m scripts.fault_soak                      # the chain CI runs: every named kill point
    python -m scripts.fault_soak --random 20          # then 20 kills after random delays
    python -m scripts.fault_soak --processes 2        # also a 2-process run, killed and resumed
    python -m scripts.fault_soak --disk-full-mount    # (root) a real full disk: a small tmpfs

Each attempt runs `scripts/train_grpo.py --profile smoke` (notebook 05's path) in a child process
that a test stops with SIGKILL: at a named point where the child waits (FAULT_POINTS in
tools/faults.py, reached through $GRPO_FAULT_AT), or after a random delay. The next attempt
resumes. After every kill, `check_after_kill` asserts what the course promises (see CHECKS). To
pay the imports (unsloth, trl: ~6 s) once, the children are forked from a process that has
already imported them (`Zygote`); `--cold` starts each attempt with a fresh `python` instead.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers.grpo_config import checkpoint_every
from helpers.paths import ROOT
from helpers.resume import checkpoint_step, latest_checkpoint
from helpers.run_folder import ADAPTER_STEP_FILE, RunFolder, has_adapter, usable_adapter
from helpers.storage import adapter_problem, file_problem

MAX_STEPS = 8  # the smoke profile then saves every 2 steps (checkpoint_every)
SAVE_STEPS = checkpoint_every(MAX_STEPS)
# The chain: each attempt resumes the last one's run and is killed at the next point.
CHAIN: tuple[tuple[str, int, str], ...] = (
    ("step", 3, "pause"),  # mid-step 3: step 3 is lost, checkpoint-2 is whole
    ("save:model-written", 4, "pause"),  # checkpoint-4 holds only the model (the old failure)
    ("save:optimizer-written", 4, "pause"),
    ("save:before-trainer-state", 4, "pause"),  # all but trainer_state.json
    ("adapter-swap", 4, "pause"),  # checkpoint-4 whole; adapter/ gone, adapter.old/ whole
    ("save:model-written", 6, "disk-full"),  # optimizer.pt cut off by a real write failure
    ("log-history", 6, "pause"),  # checkpoint-6 whole; the new log not yet renamed into place
    ("after-save", 8, "pause"),  # the last save whole; the rerun finds a finished run
)
CHECKS = (
    "exit as planned",  # killed at the point (or the disk-full sentence, exit 1)
    "a whole checkpoint kept",  # the newest whole checkpoint never went back
    "resumed from the newest whole checkpoint",  # the next attempt started right after it
    "no step before it trained twice",
    "retrained steps bit-identical",  # a step trained again gave the same weights
    "log: one entry per step",  # log_history.json: 1..K, none twice, K >= newest - save_steps
    "adapter whole, at a checkpoint",  # usable_adapter: never half-written; equal to checkpoint
)


# ---- children forked from a process that has the stack imported ----------------------------


class Zygote:
    """A process that imports the training stack once, then forks one child per attempt.

    The child's output goes through a pipe to the zygote, which appends it to the attempt's log;
    a pipe, not a file, so that a child under a file-size limit ('disk-full') can still print.
    """

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "scripts.fault_soak", "--zygote"], cwd=ROOT, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**os.environ, **child_env()},
        )
        self._expect("ready")

    def _expect(self, key: str) -> Any:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the zygote died (waiting for {key!r})")
        message = json.loads(line)
        return message[key]

    def start(self, target: str, argv: Sequence[str], env: dict[str, str], log: Path) -> int:
        """Fork a child running `target` (see TARGETS); return its pid."""
        job = {"target": target, "argv": list(argv), "env": env, "log": str(log)}
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()
        return self._expect("pid")

    def wait(self) -> int:
        """The last child's exit code (negative: killed by that signal)."""
        return self._expect("status")

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


class Cold:
    """The same interface with a fresh interpreter for each attempt (slower, nothing shared)."""

    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None

    def start(self, target: str, argv: Sequence[str], env: dict[str, str], log: Path) -> int:
        command = [sys.executable, "-m", "scripts.fault_soak", "--child", target, *argv]
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                env={**os.environ, **child_env(), **env},
            )
        return self.process.pid

    def wait(self) -> int:
        return self.process.wait()

    def close(self) -> None:
        """Nothing is kept between attempts."""


def child_env() -> dict[str, str]:
    return {"GRPO_PROFILE": "smoke", "TOKENIZERS_PARALLELISM": "false", "PYTHONHASHSEED": "0"}


def zygote_main() -> int:
    """Import the stack, then fork a child for each job read from stdin (one JSON per line)."""
    channel = os.fdopen(os.dup(1), "w")  # messages to the harness; anything printed goes to stderr
    os.dup2(2, 1)
    import unsloth  # noqa: F401  (first, as everywhere)

    from trl import GRPOTrainer  # noqa: F401

    from scripts import train_grpo  # noqa: F401
    from tools import faults  # noqa: F401

    def say(**message: Any) -> None:
        channel.write(json.dumps(message) + "\n")
        channel.flush()

    say(ready=True)
    for line in sys.stdin:
        job = json.loads(line)
        read_end, write_end = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: it never returns into this loop
            os.close(read_end)
            os.close(channel.fileno())
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.dup2(write_end, 1)
            os.dup2(write_end, 2)
            os.environ.update(job["env"])
            code = run_child(job["target"], job["argv"])
            os._exit(code)
        os.close(write_end)
        say(pid=pid)
        with open(job["log"], "ab") as log, os.fdopen(read_end, "rb") as output:
            shutil.copyfileobj(output, log)
        _, status = os.waitpid(pid, 0)
        say(status=os.waitstatus_to_exitcode(status))
    return 0


def run_child(target: str, argv: Sequence[str]) -> int:
    """Run one attempt's target; its exit code (tracebacks go to the log)."""
    try:
        code = TARGETS[target](list(argv))
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def train_child(argv: list[str]) -> int:
    """Notebook 05's path: scripts/train_grpo.py, as its command line runs it."""
    from scripts import train_grpo

    return train_grpo.cli(argv)


def install_hook_from_env() -> None:
    from helpers.storage import add_fault_hook
    from tools.faults import fault_hook, fault_plan

    plan = fault_plan(os.environ)
    if plan is not None:
        add_fault_hook(fault_hook(plan, 0))


def evaluate_child(argv: list[str]) -> int:
    """Notebook 06's evaluation of a run: RUN NUM_PROBLEMS BATCH_SIZE."""
    import unsloth  # noqa: F401

    from helpers.data import load_gsm8k
    from helpers.evaluation import decoding_settings, evaluate, save_results
    from helpers.loading import load_trained
    from helpers.profiles import PROFILES
    from helpers.session import start

    install_hook_from_env()
    run, limit, batch = Path(argv[0]), int(argv[1]), int(argv[2])
    start("smoke")
    profile = PROFILES["smoke"]
    adapter = usable_adapter(run, profile)
    model, tokenizer = load_trained(profile, adapter)
    problems = list(load_gsm8k("test", profile, limit=limit))
    settings = decoding_settings(profile, batch_size=batch)
    results = evaluate(model, tokenizer, problems, settings, adapter,
                       store=RunFolder(run).answers)
    save_results(results, run)
    return 0


def merge_child(argv: list[str]) -> int:
    """Notebook 07's merge of a run into EXPORT_DIR/merged_16bit: RUN EXPORT_DIR."""
    import unsloth  # noqa: F401

    from helpers.export import merge_to_16bit
    from helpers.hardware import CPU_ONLY
    from helpers.profiles import PROFILES
    from helpers.session import start

    install_hook_from_env()
    run, export = Path(argv[0]), Path(argv[1])
    start("smoke")
    profile = PROFILES["smoke"]
    adapter = usable_adapter(run, profile)
    # On a CPU merge_to_16bit loads the adapter on a 16-bit base itself.
    merge_to_16bit(None, None, adapter, export / "merged_16bit", profile, CPU_ONLY)
    return 0


TARGETS: dict[str, Callable[[list[str]], int]] = {
    "train": train_child, "evaluate": evaluate_child, "merge": merge_child,
}


# ---- one attempt: start, stop at the point (or after a delay), report ----------------------


@dataclass
class Attempt:
    """What one child did: how it ended, what it printed, and when."""

    label: str
    exit_code: int
    killed: bool
    output: str
    seconds: float
    reached: dict[str, Any] | None = None


def attempt(
    runner: Zygote | Cold, target: str, argv: Sequence[str], fault_dir: Path, label: str,
    at: str | None = None, action: str = "pause", kill_after: float | None = None,
    timeout: float = 300.0,
) -> Attempt:
    """Run one child; SIGKILL it once it reports reaching `at` or after `kill_after` seconds."""
    for marker in fault_dir.glob("reached-*.json"):
        marker.unlink()
    log = fault_dir / f"{label}.log"
    log.unlink(missing_ok=True)
    env = {"GRPO_FAULT_DIR": str(fault_dir), "GRPO_FAULT_ACTION": action, "GRPO_FAULT_AT": at or ""}
    began = time.monotonic()
    pid = runner.start(target, argv, env, log)
    reached, killed = None, False
    while True:
        time.sleep(0.05)
        markers = sorted(fault_dir.glob("reached-*.json"))
        waited = time.monotonic() - began
        if markers and file_problem(markers[0]) is None:
            reached = json.loads(markers[0].read_text())
        if reached or (kill_after is not None and waited >= kill_after) or waited > timeout:
            killed = _kill(pid)
            break
        if _exited(pid):
            break
    code = runner.wait()
    output = log.read_text(errors="replace")
    if waited > timeout and not reached:
        raise AssertionError(f"{label}: no fault point {at!r} within {timeout:.0f} s:\n"
                             f"{output[-3000:]}")
    return Attempt(label, code, killed, output, time.monotonic() - began, reached)


def _kill(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def _exited(pid: int) -> bool:
    """True once `pid` is gone or a zombie (the zygote reaps it after its pipe closes)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1].startswith("Z")
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or before the read
        return True


def error_lines(output: str) -> list[str]:
    """The script's one-line errors (a progress bar may share their line: stdout and stderr mix)."""
    marker = "train_grpo.py: error:"
    return [line[line.index(marker):] for line in output.splitlines() if marker in line]


def train_argv(run: Path, max_steps: int = MAX_STEPS) -> list[str]:
    return ["--profile", "smoke", "--max-steps", str(max_steps), "--output-dir", str(run)]


# ---- what must hold after every kill --------------------------------------------------------


@dataclass
class History:
    """What the checks remember between attempts of one run."""

    newest: int = 0  # step of the newest whole checkpoint after the last attempt
    trained: dict[int, str] = field(default_factory=dict)  # step -> weights' checksum
    seen_pids: set[int] = field(default_factory=set)
    state: str = ""  # what the last check found on disk
    adapter_seen: bool = False  # once there is an adapter, there must always be a whole one


def journal(fault_dir: Path) -> list[dict[str, Any]]:
    path = fault_dir / "journal-0.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def logged_steps(run: Path) -> list[int]:
    path = RunFolder(run).log
    if file_problem(path):
        return []
    return [entry["step"] for entry in json.loads(path.read_text()) if "loss" in entry]


def adapter_tensors(folder: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(folder / "adapter_model.safetensors")


def same_tensors(a: dict[str, Any], b: dict[str, Any]) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def check_after_kill(run: Path, fault_dir: Path, history: History, save_steps: int) -> list[str]:
    """Assert the course's promises on the run folder after an attempt; the checks that held.

    What it found is left in `history.state` (newest checkpoint, log, adapter) for the table.
    """
    held = []
    newest = latest_checkpoint(RunFolder(run).checkpoints)
    step = checkpoint_step(newest) if newest else 0
    assert step >= history.newest, f"the newest whole checkpoint went back to {step}"
    held.append("a whole checkpoint kept")

    entries = [e for e in journal(fault_dir) if e["pid"] not in history.seen_pids]
    starts = [e["step"] for e in entries if e["event"] == "start"]
    if starts:
        assert starts[0] == history.newest, (
            f"resumed from step {starts[0]}, not from the newest whole checkpoint "
            f"(step {history.newest})")
        held.append("resumed from the newest whole checkpoint")
    for entry in (e for e in entries if e["event"] == "step"):
        done = entry["step"]
        if done in history.trained:
            assert done > history.newest, f"step {done} was trained again though checkpoint-" \
                                          f"{history.newest} held it"
            assert entry["params"] == history.trained[done], f"step {done} retrained differently"
        history.trained[done] = entry["params"]
    if any(e["event"] == "step" for e in entries):
        held += ["no step before it trained twice", "retrained steps bit-identical"]
    history.seen_pids |= {e["pid"] for e in entries}

    steps = logged_steps(run)
    assert steps == list(range(1, len(steps) + 1)), f"log_history.json steps: {steps}"
    assert len(steps) >= step - save_steps, f"log ends at {len(steps)}, checkpoint at {step}"
    held.append("log: one entry per step")

    history.state = f"checkpoint {step}, log to step {len(steps)}"
    if step and not has_adapter(run):  # killed between the first checkpoint and the first adapter
        assert not history.adapter_seen, "the run had an adapter, and now has none"
        assert step <= save_steps, f"checkpoint-{step} is whole, yet no adapter was ever written"
        history.state += ", no adapter yet (06 says: run 05 first)"
        held.append("no adapter yet: killed before the first one")
    elif step:
        history.adapter_seen = True
        adapter = usable_adapter(run)  # raises if no whole adapter
        saved = json.loads((adapter / ADAPTER_STEP_FILE).read_text())["step"]
        history.state += f", {adapter.name}/ at step {saved}"
        assert step - save_steps <= saved <= step, f"adapter at step {saved}, checkpoint {step}"
        source = RunFolder(run).checkpoints / f"checkpoint-{saved}"
        if source.is_dir():
            assert same_tensors(adapter_tensors(adapter), adapter_tensors(source)), (
                f"{adapter.name}/ differs from {source.name}")
        held.append("adapter whole, at a checkpoint")
    history.newest = step
    return held


# ---- the chain: every named point, one after the other, on one run -------------------------


@dataclass
class Row:
    """One line of the fault-injection table."""

    point: str
    cycles: int
    held: list[str]
    seconds: float
    note: str = ""


def run_chain(runner: Zygote | Cold, root: Path, log: Callable[[str], None] = print) -> dict:
    """Train one run through every kill point in CHAIN, then to the end; check after each."""
    run, fault_dir = root / "run", root / "faults"
    fault_dir.mkdir(parents=True, exist_ok=True)
    history, rows, outputs = History(), [], {}
    for point, step, action in CHAIN:
        label = f"{point}@{step}" + ("" if action == "pause" else f" ({action})")
        done = attempt(runner, "train", train_argv(run), fault_dir, f"train-{len(rows)}",
                       at=f"{point}@{step}", action=action)
        outputs[label] = done.output
        if action == "pause":
            where = done.reached and (done.reached["point"], done.reached["step"])
            assert done.killed and where == (point, step), (
                f"{label}: not stopped there (exit {done.exit_code}):\n{done.output[-3000:]}")
        else:
            error = error_lines(done.output)
            assert done.exit_code == 1 and len(error) == 1, (
                f"{label}: expected one error line, exit 1:\n{done.output[-3000:]}")
            outputs["disk-full sentence"] = error[0]
        held = ["exit as planned", *check_after_kill(run, fault_dir, history, SAVE_STEPS)]
        rows.append(Row(label, 1, held, done.seconds, history.state))
        log(f"{label:<34} {done.seconds:5.1f} s  after the kill: {history.state}")
    done = attempt(runner, "train", train_argv(run), fault_dir, "train-final")
    outputs["final"] = done.output
    assert done.exit_code == 0, f"the final attempt failed:\n{done.output[-3000:]}"
    held = check_after_kill(run, fault_dir, history, SAVE_STEPS)
    held += check_finished(run)
    rows.append(Row("(finish)", 1, held, done.seconds, history.state))
    log(f"{'(finish)':<34} {done.seconds:5.1f} s  {history.state}")
    return {"run": run, "rows": rows, "outputs": outputs, "history": history}


def check_finished(run: Path, max_steps: int = MAX_STEPS) -> list[str]:
    """A finished run: the right global step, every step logged once, the final adapter."""
    final = RunFolder(run).checkpoints / f"checkpoint-{max_steps}"
    assert checkpoint_step(latest_checkpoint(RunFolder(run).checkpoints)) == max_steps
    assert logged_steps(run) == list(range(1, max_steps + 1))
    adapter = RunFolder(run).adapter
    assert adapter_problem(adapter) is None
    assert json.loads((adapter / ADAPTER_STEP_FILE).read_text())["step"] == max_steps
    assert same_tensors(adapter_tensors(adapter), adapter_tensors(final))
    return [f"global step {max_steps}", "final adapter == last checkpoint's"]


# ---- 06 and 07 killed mid-way ---------------------------------------------------------------


def run_evaluation_kill(runner: Zygote | Cold, run: Path, fault_dir: Path,
                        problems: int = 6, batch: int = 2) -> dict:
    """Kill 06's evaluation after the trained model's first batch; rerun; return both outputs."""
    argv = [str(run), str(problems), str(batch)]
    killed = attempt(runner, "evaluate", argv, fault_dir, "evaluate-killed",
                     at=f"eval:trained@{batch}")
    assert killed.killed, f"evaluation not stopped in the trained pass:\n{killed.output[-3000:]}"
    store = RunFolder(run).answers
    base_files = {p: p.stat().st_mtime_ns for p in store.glob("base-*/*.json")}
    trained_files = sorted(store.glob("trained-*/*.json"))
    rerun = attempt(runner, "evaluate", argv, fault_dir, "evaluate-rerun")
    assert rerun.exit_code == 0, rerun.output[-3000:]
    results = json.loads(RunFolder(run).results.read_text())
    return {"killed": killed, "rerun": rerun, "results": results, "base_files": base_files,
            "trained_files_at_kill": trained_files, "store": store}


def run_merge_kill(runner: Zygote | Cold, run: Path, export: Path, fault_dir: Path) -> dict:
    """Kill 07's merge after it wrote its staging folder, before the rename; rerun."""
    argv = [str(run), str(export)]
    killed = attempt(runner, "merge", argv, fault_dir, "merge-killed", at="export:merge")
    assert killed.killed, f"merge not stopped before its rename:\n{killed.output[-3000:]}"
    after_kill = sorted(p.name for p in export.iterdir())
    rerun = attempt(runner, "merge", argv, fault_dir, "merge-rerun")
    assert rerun.exit_code == 0, rerun.output[-3000:]
    return {"killed": killed, "after_kill": after_kill, "rerun": rerun,
            "after_rerun": sorted(p.name for p in export.iterdir())}


# ---- several processes: accelerate launch, killed as a whole and resumed --------------------


def two_process_command(run: Path, max_steps: int, dump: Path | None = None) -> list[str]:
    accelerate = Path(sys.executable).with_name("accelerate")
    # accelerate 1.16 runs one process for `--cpu`; `--multi_gpu` starts two through torchrun,
    # and with no GPU visible they join over gloo on the CPU.
    command = [
        str(accelerate), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0",
        "-m", "scripts.train_grpo", *train_argv(run, max_steps),
    ]
    return command + (["--debug-dump-params", str(dump)] if dump else [])


def launch_until(command: Sequence[str], fault_dir: Path, at: str | None,
                 timeout: float = 400.0) -> tuple[int, str, bool]:
    """Run `command` in its own process group; SIGKILL the whole group once `at` is reached."""
    for marker in fault_dir.glob("reached-*.json"):
        marker.unlink()
    env = {**os.environ, **child_env(), "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1",
           "GRPO_FAULT_DIR": str(fault_dir), "GRPO_FAULT_AT": at or ""}
    with tempfile.TemporaryFile("w+") as out:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   text=True, start_new_session=True)
        began, killed = time.monotonic(), False
        while process.poll() is None:
            if at and any(fault_dir.glob("reached-*.json")):
                os.killpg(process.pid, signal.SIGKILL)  # a disconnect takes every process
                killed = True
            elif time.monotonic() - began > timeout:
                os.killpg(process.pid, signal.SIGKILL)
                raise AssertionError(f"{' '.join(command[:3])}: no end within {timeout:.0f} s")
            time.sleep(0.1)
        out.seek(0)
        return process.wait(), out.read(), killed


# ---- the command line -----------------------------------------------------------------------


def print_table(rows: Sequence[Row]) -> None:
    print("| kill point | cycles | seconds | on disk after the kill | assertions that held |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row.point} | {row.cycles} | {row.seconds:.1f} | {row.note} | "
              f"{', '.join(row.held)} |")


def random_soak(runner: Zygote | Cold, root: Path, kills: int, seed: int) -> list[Row]:
    """Kill after random delays, `kills` times, starting a new run whenever one finishes."""
    rng = random.Random(seed)
    rows: list[Row] = []
    run_number, count, total = 0, 0, 0.0
    while count < kills:
        run, fault_dir = root / f"random-{run_number}" / "run", root / f"random-{run_number}" / "f"
        fault_dir.mkdir(parents=True, exist_ok=True)
        history = History()
        while count < kills:
            delay = rng.uniform(0.5, 14.0)
            done = attempt(runner, "train", train_argv(run), fault_dir, f"random-{count}",
                           kill_after=delay)
            held = check_after_kill(run, fault_dir, history, SAVE_STEPS)
            total += done.seconds
            if not done.killed:  # the run finished before the delay
                assert done.exit_code == 0, done.output[-3000:]
                check_finished(run)
                run_number += 1
                break
            count += 1
            print(f"random kill {count:>3} after {delay:4.1f} s: newest checkpoint step "
                  f"{history.newest}; held: {', '.join(held)}")
        else:
            done = attempt(runner, "train", train_argv(run), fault_dir, "random-final")
            assert done.exit_code == 0, done.output[-3000:]
            check_after_kill(run, fault_dir, history, SAVE_STEPS)
            check_finished(run)
    rows.append(Row(f"random delay (seed {seed})", kills, list(CHECKS[1:]), total))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--random", type=int, default=0, metavar="N",
                        help="after the chain, N kills after random delays")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--processes", type=int, choices=(1, 2), default=1,
                        help="2: also kill and resume a 2-process (gloo, CPU) run")
    parser.add_argument("--disk-full-mount", action="store_true",
                        help="(root) train into a small tmpfs until it is full, then enlarge it "
                        "and resume: a real 'No space left on device'")
    parser.add_argument("--cold", action="store_true",
                        help="a fresh python per attempt instead of forking a warm one")
    parser.add_argument("--keep", type=Path, default=None, help="work in this folder and keep it")
    parser.add_argument("--zygote", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.zygote:
        return zygote_main()
    if args.child:
        return run_child(args.child[0], args.child[1:])
    root = args.keep or Path(tempfile.mkdtemp(prefix="fault-soak-"))
    runner = Cold() if args.cold else Zygote()
    try:
        chain = run_chain(runner, root / "chain")
        rows = chain["rows"]
        evaluation = run_evaluation_kill(runner, chain["run"], root / "chain" / "faults")
        print("06 rerun after a kill in its trained pass:", *(
            line for line in evaluation["rerun"].output.splitlines()
            if line.startswith(("base: reusing", "trained: reusing"))), sep="\n  ")
        merge = run_merge_kill(runner, chain["run"], RunFolder(chain["run"]).exports,
                               root / "chain" / "faults")
        print(f"07 merge killed before its rename: {merge['after_kill']}; after the rerun: "
              f"{merge['after_rerun']}")
        if args.random:
            rows += random_soak(runner, root, args.random, args.seed)
        if args.disk_full_mount:
            rows.append(full_disk_soak(runner, root / "full-disk"))
    finally:
        runner.close()
    if args.processes == 2:
        rows.append(two_process_soak(root / "two"))
    print_table(rows)
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0


def full_disk_soak(runner: Zygote | Cold, root: Path, size: str = "6m") -> Row:
    """Train into a tmpfs of `size` until a write fails with ENOSPC; enlarge it; resume."""
    run, fault_dir = root / "run", root / "faults"
    run.mkdir(parents=True)
    fault_dir.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(run)],
                           capture_output=True, text=True)
    if mount.returncode != 0:
        print(f"--disk-full-mount skipped: cannot mount a tmpfs ({mount.stderr.strip()})")
        return Row("full tmpfs (skipped)", 0, [], 0.0)
    try:
        began, history = time.monotonic(), History()
        full = attempt(runner, "train", train_argv(run), fault_dir, "full-disk")
        errors = error_lines(full.output)
        assert full.exit_code == 1 and len(errors) == 1, full.output[-3000:]
        held = check_after_kill(run, fault_dir, history, SAVE_STEPS)
        after_failure = history.state
        print(f"full tmpfs ({size}): {errors[0]}")
        subprocess.run(["mount", "-o", "remount,size=64m", str(run)], check=True)
        done = attempt(runner, "train", train_argv(run), fault_dir, "full-disk-resumed")
        assert done.exit_code == 0, done.output[-3000:]
        held += check_after_kill(run, fault_dir, history, SAVE_STEPS) + check_finished(run)
        note = f"after the failure: {after_failure}; resumed after a remount to 64m"
        return Row(f"full tmpfs ({size})", 1, sorted(set(held)), time.monotonic() - began, note)
    finally:
        subprocess.run(["umount", str(run)], check=False)


def two_process_soak(root: Path, max_steps: int = MAX_STEPS) -> Row:
    """A 2-process run killed mid-step 5 and resumed: final step, ranks' weights compared."""
    run, fault_dir = root / "run", root / "faults"
    fault_dir.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    code, output, killed = launch_until(
        two_process_command(run, max_steps, root / "dump-a"), fault_dir, "step@5")
    assert killed, f"the 2-process run did not reach step 5 (exit {code}):\n{output[-3000:]}"
    code, output, _ = launch_until(two_process_command(run, max_steps, root / "dump-b"), fault_dir,
                                   None)
    assert code == 0, output[-4000:]
    ranks = [json.loads((root / "dump-b" / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["start_step"] == ranks[1]["start_step"] == 4
    assert ranks[0]["initial_params"] == ranks[1]["initial_params"]
    for a, b in zip(ranks[0]["steps"], ranks[1]["steps"], strict=True):
        assert a["params"] == b["params"], f"ranks differ at step {a['step']}"
    final = ranks[0]["steps"][-1]
    print(f"2 processes: resumed at step 5, final step {final['step']}, both ranks' weights "
          f"{final['params']} (identical)")
    check_finished(run, max_steps)
    return Row("2 processes: step@5", 1, ["resumed from checkpoint-4", "ranks bit-identical",
                                          f"global step {max_steps}"], time.monotonic() - began)


if __name__ == "__main__":
    raise SystemExit(main())
