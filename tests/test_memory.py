"""The memory estimator against figures peers' runs printed, and its verdicts and advice."""

from dataclasses import replace

import pytest

from helpers.hardware import A100_40GB, CPU_ONLY, TESLA_T4
from helpers.memory import (
    ARCHITECTURES,
    GIB,
    TARGET_GPU,
    architecture,
    breakdown,
    estimate,
    fit_table,
    weights_gib,
)
from helpers.profiles import PROFILES

LLAMA_8B = "unsloth/Meta-Llama-3.1-8B-Instruct-bnb-4bit"
QWEN_7B = "unsloth/Qwen2.5-Math-7B-Instruct-bnb-4bit"


def build_reasoning_model_run():
    """The peer's T4 run: Llama-3.1-8B, max_seq_length=512, gpu_memory_utilization=0.6."""
    return replace(
        PROFILES["t4"],
        model_name=LLAMA_8B,
        max_prompt_length=256,
        max_completion_length=256,
        lora_rank=8,
        num_generations=6,
        per_device_train_batch_size=1,
        gradient_accumulation_steps=6,
        gpu_memory_utilization=0.6,
    )


def test_t4_memory_matches_what_colab_reports():
    # unsloth's Colab notebooks print "GPU = Tesla T4. Max memory = 14.741 GB", computed as
    # total_memory / 1024**3, i.e. GiB: the "about 14.7 GB usable" of the peers.
    assert TESLA_T4.vram_gb == pytest.approx(14.741, abs=0.01)


def test_llama_8b_4bit_weights_match_vllm_print_within_3_percent():
    # build-reasoning-model's vLLM log on a T4: "model weights took 5.35GiB".
    assert weights_gib(architecture(LLAMA_8B)) == pytest.approx(5.35, rel=0.03)


def test_llama_8b_kv_cache_on_t4_matches_vllm_print_within_10_percent():
    # Same log: 2.64 GiB KV cache at gpu_memory_utilization=0.6. The vLLM overhead constant was
    # read off this log, so this checks the weights model and the pool arithmetic together.
    est = estimate(build_reasoning_model_run(), TESLA_T4)
    assert est.vllm_pool == pytest.approx(0.6 * 14.74, rel=0.01)
    assert est.kv_cache_available == pytest.approx(2.64, rel=0.10)
    assert est.verdict == "fits"  # the peer trained 93 steps on that T4


def test_qlora_7b_without_vllm_is_near_trls_t4_figure():
    # TRL docs: QLoRA of a 7B on a T4 used 9.2 GB (= 8.57 GiB). Its sequence length and batch
    # are not published, so the tolerance is wide: +-30%.
    est = estimate(replace(PROFILES["t4-7b"], fast_inference=False), TESLA_T4)
    assert est.vllm_pool == 0
    assert est.total == pytest.approx(9.2e9 / GIB, rel=0.30)


def test_parameter_counts_match_the_model_cards():
    # Published sizes: Llama-3.1-8B 8.03B, Qwen2.5-Math-7B 7.62B, Qwen2.5-1.5B 1.54B.
    for name, billions in [
        (LLAMA_8B, 8.03),
        (QWEN_7B, 7.62),
        ("unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit", 1.54),
    ]:
        arch = ARCHITECTURES[name]
        embeddings = arch.vocab_size * arch.hidden_size * (1 if arch.tied_embeddings else 2)
        assert (arch.linear_params() + embeddings) / 1e9 == pytest.approx(billions, rel=0.02)


@pytest.mark.parametrize("name", ["t4", "t4-7b", "large"])
def test_every_gpu_profile_fits_its_target_gpu(name):
    est = estimate(PROFILES[name], TARGET_GPU[name])
    assert est.verdict == "fits", est.summary()
    assert est.kv_cache_available > est.kv_cache_needed
    assert est.advice() == ""


def test_too_much_vllm_memory_wont_fit_and_says_lower_utilization():
    est = estimate(replace(PROFILES["t4-7b"], gpu_memory_utilization=0.95), TESLA_T4)
    assert est.verdict == "won't fit"
    assert "lower gpu_memory_utilization" in est.advice()


def test_too_little_vllm_memory_leaves_no_kv_cache_and_says_raise_it():
    est = estimate(replace(PROFILES["t4-7b"], gpu_memory_utilization=0.4), TESLA_T4)
    assert est.kv_cache_available < est.kv_cache_needed
    assert est.verdict == "won't fit"
    assert "raise gpu_memory_utilization" in est.advice()


def test_long_completions_without_vllm_blame_activations():
    long = replace(
        PROFILES["t4-7b"], fast_inference=False, max_completion_length=4096,
        per_device_train_batch_size=4, gradient_accumulation_steps=1,
    )
    est = estimate(long, TESLA_T4)
    assert est.verdict in {"tight", "won't fit"}
    assert "max_completion_length" in est.advice()


def test_more_completion_tokens_cost_more_memory():
    base = estimate(PROFILES["t4"], TESLA_T4)
    longer = estimate(replace(PROFILES["t4"], max_completion_length=1024), TESLA_T4)
    assert longer.total > base.total
    assert longer.kv_cache_needed == pytest.approx(base.kv_cache_needed * (256 + 1024) / 512)


def test_smoke_on_cpu_needs_no_gpu():
    est = estimate(PROFILES["smoke"], CPU_ONLY)
    assert est.verdict == "cpu"
    assert "CPU" in est.summary()


def test_unknown_architecture_names_the_fix():
    with pytest.raises(KeyError, match="ARCHITECTURES"):
        architecture("someone/NewModel-3B")


def test_breakdown_and_table_are_printable():
    text = breakdown(estimate(PROFILES["t4"], TESLA_T4))
    assert "estimated peak" in text and "fits" in text
    table = fit_table(list(PROFILES.values()))
    assert table.count("fits") == 3 and "smoke" not in table
    assert "A100" in fit_table([PROFILES["large"]], {"large": A100_40GB})
