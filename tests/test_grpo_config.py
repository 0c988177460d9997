"""The GRPOConfig from a profile (helpers.grpo_config): the course's settings, a learner's edits
said beside them, and the checks that stop before anything loads."""

import unsloth  # noqa: F401  (before trl and transformers, as in the notebooks)

# isort: split
from dataclasses import replace
from pathlib import Path

import pytest

from helpers.grpo_config import (
    KNOB_NOTES,
    TrainingConfigError,
    check_model_name,
    checkpoint_every,
    explain_config,
    grpo_settings,
    make_grpo_config,
    validate,
)
from helpers.hardware import A100_40GB, CPU_ONLY, TESLA_T4
from helpers.paths import ROOT
from helpers.profiles import PROFILES
from helpers.run_folder import RunFolder

SMOKE = PROFILES["smoke"]


def settings_for(profile, hw, **overrides):
    return grpo_settings(profile, hw, "/tmp/unused", **overrides)


# ---- the config ---------------------------------------------------------------------------


def test_t4_config_has_the_t4_defaults_and_fp16():
    s = settings_for(PROFILES["t4"], TESLA_T4)
    assert (s["num_generations"], s["max_completion_length"]) == (4, 256)
    assert (s["per_device_train_batch_size"], s["gradient_accumulation_steps"]) == (1, 4)
    assert (s["optim"], s["max_grad_norm"], s["learning_rate"]) == ("adamw_8bit", 0.1, 5e-6)
    assert (s["fp16"], s["bf16"], s["use_cpu"]) == (True, False, False)
    assert s["report_to"] == "none" and s["push_to_hub"] is False and s["logging_steps"] == 1
    validate(PROFILES["t4"], TESLA_T4, s)


def test_ampere_gets_bf16():
    s = settings_for(PROFILES["large"], A100_40GB)
    assert (s["bf16"], s["fp16"]) == (True, False)


def test_cpu_config_is_a_real_grpo_config_and_the_same_for_every_caller():
    from helpers.grpo_config import make_grpo_config

    first = make_grpo_config(SMOKE, CPU_ONLY, "/tmp/run-a")
    second = make_grpo_config(SMOKE, CPU_ONLY, "/tmp/run-a")
    assert first.to_dict() == second.to_dict()
    assert (first.use_cpu, first.bf16, first.fp16) == (True, False, False)
    assert first.max_prompt_length == SMOKE.max_prompt_length
    assert first.save_steps == checkpoint_every(SMOKE.max_steps) == 20
    assert first.beta == 0.0 and first.push_to_hub is False


def test_overrides_win_and_are_checked():
    s = settings_for(SMOKE, CPU_ONLY, max_steps=3, num_generations=2)
    assert (s["max_steps"], s["num_generations"]) == (3, 2)
    validate(SMOKE, CPU_ONLY, s)


# ---- one config for notebook 05 and the script ---------------------------------------------

LOSS_KEYS = ("loss_type", "scale_rewards", "epsilon", "num_iterations",
             "mask_truncated_completions", "weight_decay")


def test_the_loss_settings_are_explicit_and_equal_trls_own_defaults():
    from dataclasses import fields as dataclass_fields

    from trl import GRPOConfig

    trl_default = {f.name: f.default for f in dataclass_fields(GRPOConfig)}
    for profile, hw in [(SMOKE, CPU_ONLY), (PROFILES["t4"], TESLA_T4)]:
        s = settings_for(profile, hw)
        assert {k: s[k] for k in LOSS_KEYS} == {k: trl_default[k] for k in LOSS_KEYS}
        assert trl_default["epsilon_high"] is None and s["epsilon_high"] == s["epsilon"]
        assert (s["loss_type"], s["scale_rewards"], s["epsilon"], s["num_iterations"]) == (
            "dapo", "group", 0.2, 1)


def test_unsloths_gpu_config_would_change_what_grpo_settings_leaves_out():
    """unsloth 2026.10.9 rewrites an explicit dapo and weight_decay unless they are given."""
    import importlib.util

    package = Path(importlib.util.find_spec("unsloth").submodule_search_locations[0])
    rl = (package / "models" / "rl.py").read_text()
    assert "elif loss_type.lower() == 'dapo' and not _unsloth_default_loss_type" in rl
    assert "mask_truncated_completions = True" in rl and "epsilon_high = 0.28" in rl
    assert '"weight_decay": 0.001' in rl
    s = settings_for(PROFILES["t4"], TESLA_T4)
    assert s["epsilon_high"] is not None and s["mask_truncated_completions"] is False
    assert s["weight_decay"] == 0.0


def test_the_course_config_is_named_as_the_scripts(tmp_path):
    from trl import GRPOConfig

    from helpers.grpo_config import compare_with_course

    line = compare_with_course(make_grpo_config(SMOKE, CPU_ONLY, tmp_path), SMOKE, CPU_ONLY,
                               tmp_path)
    assert line == "The course's config for smoke: the one scripts/train_grpo.py trains."
    built = GRPOConfig(**grpo_settings(SMOKE, CPU_ONLY, tmp_path, max_steps=7))
    assert compare_with_course(built, SMOKE, CPU_ONLY, tmp_path, max_steps=7) == line


def test_a_learners_edit_is_named_with_the_courses_value_not_refused(tmp_path):
    from trl import GRPOConfig

    from helpers.grpo_config import compare_with_course

    changed = {"beta": 0.04, "top_entropy_quantile": 0.5}  # the second is not in grpo_settings
    config = GRPOConfig(**{**grpo_settings(SMOKE, CPU_ONLY, tmp_path), **changed})
    line = compare_with_course(config, SMOKE, CPU_ONLY, tmp_path)
    assert line == ("Your changes to the course's settings: beta=0.04 (course: 0.0); "
                    "top_entropy_quantile=0.5 (course: 1.0)")


def test_another_output_dir_and_step_count_are_changes_too(tmp_path):
    from helpers.grpo_config import compare_with_course

    config = make_grpo_config(SMOKE, CPU_ONLY, tmp_path / "a", max_steps=5)
    line = compare_with_course(config, SMOKE, CPU_ONLY, tmp_path / "b")
    assert f"max_steps=5 (course: {SMOKE.max_steps})" in line
    assert f"output_dir={str(tmp_path / 'a')!r}" in line


def test_an_edit_that_cannot_run_still_stops_with_the_fix(tmp_path):
    """A changed knob trains; one the memory estimate says won't fit stops before loading."""
    from trl import GRPOConfig

    from helpers.grpo_config import compare_with_course

    t4 = PROFILES["t4"]
    huge = grpo_settings(t4, TESLA_T4, tmp_path, max_completion_length=16384)
    huge.update(fp16=False, use_cpu=True)  # what a T4 would build, constructed on this CPU
    with pytest.raises(TrainingConfigError, match=r"won't fit"):
        compare_with_course(GRPOConfig(**huge), t4, TESLA_T4, tmp_path)


# ---- checks that stop before loading --------------------------------------------------------


def test_batch_not_divisible_by_generations_names_the_fix():
    s = settings_for(PROFILES["t4"], TESLA_T4, gradient_accumulation_steps=3)
    with pytest.raises(TrainingConfigError, match=r"gradient_accumulation_steps=4 \(or"):
        validate(PROFILES["t4"], TESLA_T4, s)


def test_bf16_on_a_t4_is_refused():
    s = settings_for(PROFILES["t4"], TESLA_T4, bf16=True, fp16=False)
    with pytest.raises(TrainingConfigError, match="Tesla T4 has no bf16.*remove the bf16"):
        validate(PROFILES["t4"], TESLA_T4, s)


def test_fp16_on_cpu_is_refused():
    with pytest.raises(TrainingConfigError, match="fp16=True needs a CUDA GPU"):
        validate(SMOKE, CPU_ONLY, settings_for(SMOKE, CPU_ONLY, fp16=True))


def test_unknown_model_names_are_refused_without_the_network(tmp_path):
    with pytest.raises(TrainingConfigError, match="Unknown model 'someone/Qwen9-70B'"):
        check_model_name("someone/Qwen9-70B")
    with pytest.raises(TrainingConfigError, match="neither a folder"):
        check_model_name("qwen 7b please")
    check_model_name(str(tmp_path))  # a local folder is fine
    check_model_name(PROFILES["t4"].model_name)
    unknown = replace(PROFILES["t4"], model_name="someone/Qwen9-70B")
    with pytest.raises(TrainingConfigError, match="Unknown model"):
        validate(unknown, TESLA_T4, settings_for(unknown, TESLA_T4))


def test_a_profile_that_wont_fit_is_refused_with_the_knob_to_turn():
    greedy = replace(PROFILES["t4"], gpu_memory_utilization=0.95)
    with pytest.raises(TrainingConfigError, match="won't fit.*lower gpu_memory_utilization"):
        validate(greedy, TESLA_T4, settings_for(greedy, TESLA_T4))


def test_checkpoints_live_in_the_run_folder(tmp_path):
    assert RunFolder(tmp_path).checkpoints == tmp_path / "checkpoints"


def config_cell_notes() -> dict[str, str]:
    """`field: comment` for every `field=value,  # comment` line of notebook 05's config cell."""
    import json
    import re

    cells = json.loads((ROOT / "notebooks" / "05_grpo_training.ipynb").read_text())["cells"]
    cell = next("".join(c["source"]) for c in cells
                if c["cell_type"] == "code" and "config = GRPOConfig(" in "".join(c["source"]))
    return {m[1]: m[2] for m in re.finditer(r"^    (\w+)=.*?,  # (.*)$", cell, re.M)}


def test_the_config_cell_and_explain_config_use_the_same_notes():
    cell = config_cell_notes()
    assert list(cell) == list(KNOB_NOTES), "the cell's fields and KNOB_NOTES differ (or order)"
    differ = {name: (cell[name], note) for name, note in KNOB_NOTES.items() if cell[name] != note}
    assert not differ, f"notebook 05's comments differ from grpo_config.KNOB_NOTES: {differ}"
    explained = explain_config(make_grpo_config(PROFILES["smoke"], CPU_ONLY, "out"))
    assert all(f"# {note}" in explained for note in KNOB_NOTES.values())
