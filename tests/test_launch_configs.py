"""configs/accelerate: each file loads with the installed accelerate, goes through the checks
`accelerate launch` makes, and the DeepSpeed JSON passes accelerate's DeepSpeedPlugin checks.

DeepSpeed itself is not installed (it needs a GPU); nothing here imports it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from accelerate.commands.config.config_args import load_config_from_file
from accelerate.commands.launch import _validate_launch_command, launch_command_parser
from accelerate.utils import DeepSpeedPlugin, DistributedType
from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

from helpers.paths import ROOT

CONFIGS = ROOT / "configs" / "accelerate"
EXPECTED = {  # file: (distributed type, ZeRO stage or None, zero3_init_flag)
    "ddp.yaml": (DistributedType.MULTI_GPU, None, None),
    "zero2.yaml": (DistributedType.DEEPSPEED, 2, False),
    "zero3.yaml": (DistributedType.DEEPSPEED, 3, True),
}


def test_every_config_is_covered():
    assert sorted(p.name for p in CONFIGS.glob("*.yaml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_yaml_loads_with_accelerate(name):
    config = load_config_from_file(str(CONFIGS / name))  # raises on an unknown key
    kind, stage, _ = EXPECTED[name]
    assert config.distributed_type == kind
    assert config.use_cpu is False
    # Precision comes from the script's GRPOConfig (bf16 on Ampere+, fp16 on a T4). A DeepSpeed
    # YAML must not set it at all: with a JSON file, accelerate refuses a second source.
    assert config.mixed_precision == ("no" if stage is None else None)
    if stage is not None:
        ds_file = ROOT / config.deepspeed_config["deepspeed_config_file"]
        assert ds_file.is_file(), f"{name} points at a missing {ds_file.name}"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_gpu_only_is_said_with_the_command(name):
    text = (CONFIGS / name).read_text()
    assert "GPU ONLY" in text
    assert f"accelerate launch --config_file configs/accelerate/{name}" in text


def _launch_env(name: str, num_processes: int = 4) -> dict[str, str]:
    """What `accelerate launch --config_file NAME ...` would put in each process's environment."""
    argv = ["--config_file", str(CONFIGS / name), "--num_processes", str(num_processes),
            "-m", "scripts.train_grpo", "--profile", "large"]
    args, defaults, from_config = _validate_launch_command(launch_command_parser().parse_args(argv))
    assert args.num_processes == num_processes
    if not args.use_deepspeed:
        return prepare_multi_gpu_env(args)
    args.deepspeed_fields_from_accelerate_config = ",".join(defaults.deepspeed_config)
    _, env = prepare_deepspeed_cmd_env(args)
    return env


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_launcher_accepts_config(name, monkeypatch):
    """The launcher's own validation, then the plugin the training processes build from its env."""
    monkeypatch.chdir(ROOT)  # the YAML names the JSON relative to the course root
    env = _launch_env(name)
    kind, stage, zero3_init = EXPECTED[name]
    assert env["ACCELERATE_MIXED_PRECISION"] == "no"
    if stage is None:
        assert "ACCELERATE_USE_DEEPSPEED" not in env
        return
    assert env["ACCELERATE_USE_DEEPSPEED"] == "true"
    for key, value in env.items():
        if key.startswith("ACCELERATE_"):
            monkeypatch.setenv(key, value)
    plugin = DeepSpeedPlugin()  # what Accelerator() does in each process; raises on bad config
    assert plugin.zero_stage == stage
    assert plugin.zero3_init_flag is zero3_init
    assert plugin.hf_ds_config.is_zero3() is (stage == 3)
    assert not plugin.hf_ds_config.is_offload()  # offload is an exercise, not the default


def _ds_configs() -> list[Path]:
    return sorted(CONFIGS.glob("ds_*.json"))


def _auto_keys(node: dict, prefix: str = "") -> list[str]:
    keys = []
    for key, value in node.items():
        if isinstance(value, dict):
            keys += _auto_keys(value, f"{prefix}{key}.")
        elif value == "auto":
            keys.append(prefix + key)
    return keys


@pytest.mark.parametrize("path", _ds_configs(), ids=lambda p: p.name)
def test_deepspeed_json_passes_the_plugin(path):
    config = json.loads(path.read_text())
    plugin = DeepSpeedPlugin(hf_ds_config=str(path), zero3_init_flag=config["zero_optimization"]
                             ["stage"] == 3)
    plugin.set_mixed_precision("bf16")  # what an Ampere+ run asks for
    assert plugin.deepspeed_config["bf16"] == {"enabled": True}
    assert plugin.deepspeed_config["fp16"] == {"enabled": False}
    # The profiles use bitsandbytes' AdamW8bit, which DeepSpeed refuses without this flag.
    assert config["zero_allow_untested_optimizer"] is True
    assert "optimizer" not in config and "scheduler" not in config  # the Trainer's, from GRPOConfig


@pytest.mark.parametrize("path", _ds_configs(), ids=lambda p: p.name)
def test_every_auto_is_one_transformers_fills(path):
    """An "auto" the Trainer does not fill would reach DeepSpeed as the string 'auto'."""
    import transformers.integrations.deepspeed as hf_deepspeed

    source = Path(hf_deepspeed.__file__).read_text()
    autos = _auto_keys(json.loads(path.read_text()))
    assert autos
    for key in autos:
        assert f'"{key}"' in source, f"{path.name}: transformers never fills {key!r}"

