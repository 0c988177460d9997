"""Profile selection, precision and the one-line errors, from described (not real) hardware."""

from dataclasses import replace

import pytest

from helpers.hardware import (
    A100_40GB,
    CPU_ONLY,
    TESLA_T4,
    Hardware,
    vllm_requirement,
)
from helpers.profiles import (
    PROFILES,
    T4,
    ProfileError,
    default_profile_name,
    describe_expected_time,
    expected_t4_minutes,
    select_profile,
    t4_step_seconds,
)

L4 = Hardware(True, "NVIDIA L4", 22.5, (8, 9))
RTX_3060 = Hardware(True, "NVIDIA GeForce RTX 3060", 11.8, (8, 6))


@pytest.fixture(autouse=True)
def no_env_profile(monkeypatch):
    monkeypatch.delenv("GRPO_PROFILE", raising=False)


@pytest.mark.parametrize(
    ("hw", "expected"), [(CPU_ONLY, "smoke"), (TESLA_T4, "t4"), (A100_40GB, "large"), (L4, "large")]
)
def test_default_profile_follows_the_hardware(hw, expected):
    assert default_profile_name(hw) == expected
    assert select_profile(hw).name == expected


@pytest.mark.parametrize(
    ("hw", "precision"), [(TESLA_T4, "fp16"), (A100_40GB, "bf16"), (L4, "bf16"), (CPU_ONLY, "fp32")]
)
def test_precision_comes_from_compute_capability(hw, precision):
    assert hw.precision == precision


def test_t4_never_gets_bf16_even_if_torch_would_claim_it():
    # The decision reads only the compute capability; 7.5 < 8.0 means fp16.
    assert Hardware(True, "Tesla T4", 15.0, (7, 5)).precision == "fp16"


def test_a_bf16_gpu_may_run_the_t4s_fp16_path_but_nothing_runs_what_it_lacks():
    assert replace(A100_40GB, precision="fp16").precision == "fp16"
    with pytest.raises(ValueError, match="cannot run on Tesla T4: use 'fp16'"):
        replace(TESLA_T4, precision="bf16")
    with pytest.raises(ValueError, match="cannot run on a CPU: use 'fp32'"):
        Hardware(False, precision="fp16")


def test_vllm_pin_follows_the_t4_rule():
    assert vllm_requirement(TESLA_T4) == "vllm==0.11.2"
    assert vllm_requirement(A100_40GB) == "vllm==0.11.2"  # trl 0.22.2 needs < 0.12: test_locks


def test_environment_variable_overrides_the_hardware(monkeypatch):
    monkeypatch.setenv("GRPO_PROFILE", "t4-7b")
    assert select_profile(TESLA_T4).name == "t4-7b"
    assert select_profile(TESLA_T4, "smoke").name == "smoke"  # the notebook parameter wins


def test_unknown_profile_is_a_one_line_error_naming_the_choices(monkeypatch):
    monkeypatch.setenv("GRPO_PROFILE", "t5")
    with pytest.raises(ProfileError) as error:
        select_profile(TESLA_T4)
    message = str(error.value)
    assert "\n" not in message
    for name in PROFILES:
        assert name in message


def test_gpu_profile_on_cpu_names_the_fix():
    with pytest.raises(ProfileError, match="GRPO_PROFILE=smoke") as error:
        select_profile(CPU_ONLY, "t4")
    assert "\n" not in str(error.value)


def test_profile_too_big_for_the_gpu_suggests_one_that_fits():
    with pytest.raises(ProfileError, match="GRPO_PROFILE=t4") as error:
        select_profile(RTX_3060, "large")
    assert "11.8 GB" in str(error.value)


def test_t4_profile_has_the_design_card_defaults():
    t4 = PROFILES["t4"]
    assert (t4.num_generations, t4.max_completion_length) == (4, 256)
    assert (t4.per_device_train_batch_size, t4.gradient_accumulation_steps) == (1, 4)
    assert t4.fast_inference and "Qwen2.5-1.5B-Instruct" in t4.model_name


def test_the_seeds_models_stay_selectable_with_their_purpose():
    assert "Qwen2.5-Math-7B-Instruct" in PROFILES["t4-7b"].model_name
    assert "Llama-3.1-8B-Instruct" in PROFILES["large"].model_name
    assert "95%" in PROFILES["t4-7b"].purpose  # honest: the gain is mostly format
    for profile in PROFILES.values():
        if profile.name != "smoke":
            assert profile.purpose and profile.time_source


def test_default_t4_run_fits_a_free_colab_session():
    # Free Colab sessions often end after 1-2 hours: the slow end of the estimate, plus ~10 min
    # of install and load, must stay near an hour.
    low, high = expected_t4_minutes(PROFILES["t4"])
    assert high + 10 <= 65 and low < high
    assert "not measured" in PROFILES["t4"].time_source  # an estimate says so
    assert expected_t4_minutes(PROFILES["t4-7b"])[0] > high  # the 7B is the slow option
    assert expected_t4_minutes(PROFILES["large"]) is None
    assert expected_t4_minutes(PROFILES["t4"], max_steps=30) == (5, 10)


def test_t4_7b_spells_its_own_completion_budget():
    """replace() copies every field it is not given: without its own budget, a change to t4's
    would silently change t4-7b's."""
    import ast
    import inspect

    from helpers import profiles

    tree = ast.parse(inspect.getsource(profiles))
    keywords: set[str | None] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "T4_MATH_7B":
            keywords = {k.arg for k in node.value.keywords}
    assert "max_completion_length" in keywords, "T4_MATH_7B must set max_completion_length"


def test_every_t4_time_follows_the_completion_budget():
    """The T4 seconds hold for t4_step_tokens; a profile with twice the budget takes twice as long
    in every place a T4 time shows: the minutes, the sentence, the journey and the cited figure."""
    from helpers.journey import journey
    from tools.cited_numbers import profile_figures

    longer = replace(T4, max_completion_length=2 * T4.max_completion_length)
    assert T4.t4_step_tokens == T4.max_completion_length  # today's estimate is for today's budget
    assert t4_step_seconds(longer) == tuple(2 * s for s in T4.t4_seconds_per_step)
    assert expected_t4_minutes(longer, max_steps=30) == (10, 20)
    assert "30 steps x 20-40 s = 10-20 min" in describe_expected_time(longer, max_steps=30)
    slower = [leg.notebook for leg, now in zip(journey(longer), journey(T4), strict=True)
              if leg.total != now.total]
    assert slower == ["grpo_training"]  # the notebook that trains
    assert profile_figures({"t4": longer})["profile.t4.t4_step_seconds"] == "20-40 s"


def test_a_t4_time_without_its_token_count_is_refused():
    with pytest.raises(ValueError, match="t4_step_tokens together"):
        replace(T4, t4_step_tokens=None)
    with pytest.raises(ValueError, match="t4_step_tokens together"):
        replace(PROFILES["smoke"], t4_step_tokens=256)


def test_expected_time_sentence_names_steps_and_source():
    text = describe_expected_time(PROFILES["t4"], max_steps=60)
    assert "60 steps x 10-20 s = 10-20 min" in text and "24.2 s/step" in text
    assert "No T4 time" in describe_expected_time(PROFILES["smoke"])


@pytest.mark.parametrize("profile", PROFILES.values(), ids=PROFILES)
def test_every_profile_has_a_valid_grpo_batch(profile):
    # trl: generation batch (completions) must divide into groups of num_generations.
    completions = profile.per_device_train_batch_size * profile.gradient_accumulation_steps
    assert completions % profile.num_generations == 0


def test_only_gpu_profiles_use_vllm():
    for profile in PROFILES.values():
        assert profile.fast_inference == (profile.min_vram_gb > 0)
