"""Will this profile fit on this GPU? A peak-memory estimate made before anything is loaded.

The estimate adds up, in GiB (2**30 bytes, the unit torch and vLLM print):
- the 4-bit (NF4) weights, with the embeddings and LM head kept in 16-bit;
- vLLM's pool (`gpu_memory_utilization` x GPU memory). It holds those weights (unsloth shares
  them with training), vLLM's own working memory and the KV cache, which must hold
  `generation_batch_size` sequences of `max_prompt_length + max_completion_length` tokens;
- training outside that pool: LoRA parameters, gradients and optimizer state, activations with
  gradient checkpointing (one layer recomputed at a time), and the log-probability logits.
Without vLLM (HF generation) the weights and the KV cache sit outside any pool instead.

Checked against figures that peers' runs printed (see tests/test_memory.py for tolerances):
- A Colab T4 reports 14.74 GiB total (`torch.cuda.get_device_properties`), "about 14.7 GB".
- build-reasoning-model (Llama-3.1-8B-Instruct bnb-4bit, T4, gpu_memory_utilization=0.6,
  max_seq_length=512): vLLM printed "model weights took 5.35GiB" and a KV cache of 2.64 GiB.
- vLLM's non-KV share: unsloth_zoo 2026.10.9 `vllm_utils.load_vllm` tabulates a torch
  activation peak of 0.18-0.62 GiB (2048-8192 batched tokens) plus 0.13 GiB non-torch memory;
  the T4 log above implies 0.6 x 14.74 - 5.35 - 2.64 = 0.85 GiB. VLLM_OVERHEAD_GIB uses 0.85.
- TRL's docs: QLoRA of a 7B on a T4 used 9.2 GB (no vLLM; its sequence length and batch are
  not published, so that test allows +-30%).
Architecture numbers are the models' Hugging Face `config.json` values (Qwen2.5-Math-7B,
Qwen2.5-1.5B, Llama-3.1-8B model cards), written down here so no download is needed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from helpers.hardware import A100_40GB, TESLA_T4, Hardware
from helpers.profiles import SMOKE_MODEL, Profile

GIB = 1024**3
Verdict = Literal["fits", "tight", "won't fit", "cpu"]

# NF4 stores 4 bits a weight plus, with double quantization, one 8-bit scale per 64 weights
# and one fp32 scale per 256 of those blocks: 0.5 + 1/64 + 4/(64*256) bytes a weight.
NF4_BYTES_PER_PARAM = 0.5 + 1 / 64 + 4 / (64 * 256)
VLLM_OVERHEAD_GIB = 0.85  # vLLM's activation peak + non-torch memory inside its pool (above)
CUDA_CONTEXT_GIB = 0.4  # CUDA context + allocator slack when torch alone owns the GPU
FITS_BELOW, TIGHT_BELOW = 0.85, 1.0  # fraction of the GPU's memory


@dataclass(frozen=True)
class Architecture:
    """The shape numbers of a decoder-only transformer that memory depends on."""

    num_layers: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    tied_embeddings: bool

    def linear_params(self) -> int:
        """Weights in the attention and MLP projections: the ones stored in 4-bit."""
        h = self.hidden_size
        q, kv = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        per_layer = h * q + 2 * h * kv + q * h + 3 * h * self.intermediate_size
        return per_layer * self.num_layers

    def embedding_params(self) -> int:
        """Input embeddings, plus the LM head when it is not tied to them."""
        return self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2)

    def lora_params(self, rank: int) -> int:
        """LoRA A and B matrices on all seven projections, rank `rank`."""
        h, i = self.hidden_size, self.intermediate_size
        q, kv = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        dims = [(h, q), (h, kv), (h, kv), (q, h), (h, i), (h, i), (i, h)]
        return rank * sum(a + b for a, b in dims) * self.num_layers

    def kv_bytes_per_token(self) -> int:
        """K and V for one token across all layers, 16-bit."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * 2


ARCHITECTURES: dict[str, Architecture] = {
    # Qwen/Qwen2.5-Math-7B-Instruct config.json (Qwen2 architecture, 7.6B parameters).
    "unsloth/Qwen2.5-Math-7B-Instruct-bnb-4bit": Architecture(
        28, 3584, 18944, 28, 4, 128, 152064, tied_embeddings=False
    ),
    # Qwen/Qwen2.5-1.5B-Instruct config.json (1.5B parameters, tied embeddings).
    "unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit": Architecture(
        28, 1536, 8960, 12, 2, 128, 151936, tied_embeddings=True
    ),
    # meta-llama/Llama-3.1-8B-Instruct config.json (8.0B parameters).
    "unsloth/Meta-Llama-3.1-8B-Instruct-bnb-4bit": Architecture(
        32, 4096, 14336, 32, 8, 128, 128256, tied_embeddings=False
    ),
    # helpers.smoke_model.RECIPE (the BPE stops at 471 tokens, + 4 format tags).
    SMOKE_MODEL: Architecture(4, 128, 512, 4, 4, 32, 475, tied_embeddings=True),
}

# The GPU each profile is written for: the README's "fits" table lists these.
TARGET_GPU: dict[str, Hardware] = {"t4": TESLA_T4, "t4-7b": TESLA_T4, "large": A100_40GB}
NVIDIA_L4 = Hardware(True, "NVIDIA L4", 22.05, (8, 9))  # 24 GB card; torch reports ~22 GiB


@dataclass(frozen=True)
class MemoryEstimate:
    """Peak GPU memory for one profile on one GPU, by part, in GiB."""

    profile: str
    gpu: str
    gpu_gib: float
    weights: float
    vllm_pool: float  # 0 without vLLM
    kv_cache_available: float  # what vLLM's pool leaves for the KV cache (0 without vLLM)
    kv_cache_needed: float
    lora_and_optimizer: float
    activations: float
    logits: float
    other: float  # CUDA context (vLLM counts it inside its pool)

    @property
    def total(self) -> float:
        """The peak: vLLM's whole pool, or weights + KV cache, plus training."""
        base = self.vllm_pool if self.vllm_pool else self.weights + self.kv_cache_needed
        return base + self.lora_and_optimizer + self.activations + self.logits + self.other

    @property
    def verdict(self) -> Verdict:
        """fits (<85% of the GPU), tight (85-100%), or won't fit; vLLM's KV cache must fit too."""
        if self.gpu_gib == 0:
            return "cpu"
        if self.vllm_pool and self.kv_cache_available < self.kv_cache_needed:
            return "won't fit"
        ratio = self.total / self.gpu_gib
        return "fits" if ratio < FITS_BELOW else "tight" if ratio < TIGHT_BELOW else "won't fit"

    def advice(self) -> str:
        """Which knob to turn first, in one sentence (empty when it fits)."""
        if self.verdict in ("fits", "cpu"):
            return ""
        if self.vllm_pool and self.kv_cache_available < self.kv_cache_needed:
            return (
                f"vLLM's KV cache ({self.kv_cache_available:.2f} GiB left in its pool) cannot hold "
                f"{self.kv_cache_needed:.2f} GiB of sequences: raise gpu_memory_utilization, or "
                "lower max_completion_length or num_generations."
            )
        training = self.lora_and_optimizer + self.activations + self.logits
        if self.vllm_pool and self.vllm_pool > training:
            return (
                f"vLLM reserves {self.vllm_pool:.1f} GiB: lower gpu_memory_utilization (in 0.1 "
                "steps), or pick a smaller model's profile (t4)."
            )
        return (
            "Training activations and logits dominate: lower max_completion_length or "
            "per_device_train_batch_size (raise gradient_accumulation_steps to keep the batch)."
        )

    def rows(self) -> list[tuple[str, float]]:
        """(part, GiB) for a printed breakdown."""
        parts = [
            ("4-bit weights (+16-bit embeddings)", self.weights),
            ("vLLM pool (holds the weights + KV cache)", self.vllm_pool),
            ("KV cache needed by the generations", self.kv_cache_needed),
            ("KV cache available in vLLM's pool", self.kv_cache_available),
            ("LoRA params + grads + optimizer", self.lora_and_optimizer),
            ("activations (checkpointed)", self.activations),
            ("logits for log-probs", self.logits),
            ("CUDA context", self.other),
        ]
        return [(name, gib) for name, gib in parts if gib]

    def summary(self) -> str:
        """One line: total, GPU, verdict and advice."""
        if self.verdict == "cpu":
            return f"{self.profile}: runs on CPU, no GPU memory needed."
        line = (
            f"{self.profile} on {self.gpu}: ~{self.total:.1f} of {self.gpu_gib:.1f} GiB "
            f"({self.total / self.gpu_gib:.0%}) -> {self.verdict}"
        )
        return f"{line}. {self.advice()}" if self.advice() else line


def architecture(model_name: str) -> Architecture:
    """The shape numbers for a known model name; a clear error otherwise."""
    if model_name not in ARCHITECTURES:
        raise KeyError(
            f"No architecture numbers for {model_name!r}: add its config.json values "
            "(layers, hidden, intermediate, heads, kv heads, head dim, vocab) to "
            "helpers.memory.ARCHITECTURES."
        )
    return ARCHITECTURES[model_name]


def weights_gib(arch: Architecture) -> float:
    """4-bit projections plus 16-bit embeddings, LM head (if untied) and norms."""
    norms = (2 * arch.num_layers + 1) * arch.hidden_size
    sixteen_bit = arch.embedding_params() + norms
    return (arch.linear_params() * NF4_BYTES_PER_PARAM + 2 * sixteen_bit) / GIB


def optimizer_bytes_per_param(optim: str) -> float:
    """Adam keeps two moments: 8 bytes a parameter in fp32, 2 in 8-bit (bitsandbytes)."""
    return 2.0 if "8bit" in optim else 0.0 if optim == "sgd" else 8.0


def estimate(profile: Profile, hw: Hardware) -> MemoryEstimate:
    """Peak GPU memory of `profile` on `hw` (all GiB); on CPU a zero estimate, verdict 'cpu'."""
    arch = architecture(profile.model_name)
    gpu_gib = hw.vram_gb if hw.cuda else 0.0
    seq = profile.max_seq_length
    generation_batch = profile.per_device_train_batch_size * profile.gradient_accumulation_steps
    kv_needed = generation_batch * seq * arch.kv_bytes_per_token() / GIB
    weights = weights_gib(arch)
    # LoRA in fp32: the parameter, its gradient, and the optimizer's moments.
    lora = arch.lora_params(profile.lora_rank) * (8 + optimizer_bytes_per_param(profile.optim))
    tokens = profile.per_device_train_batch_size * seq  # one micro-batch forward/backward
    h, i = arch.hidden_size, arch.intermediate_size
    # Checkpointing keeps each layer's input; one layer is recomputed (attention + MLP
    # intermediates, fp16, about twice over during backward) plus one dequantized weight.
    activations = 2 * tokens * (h * arch.num_layers + 2 * (6 * h + 3 * i)) + 2 * h * i
    # unsloth computes log-probs in chunks: about one fp32 copy of the logits is alive.
    logits = tokens * arch.vocab_size * 4
    if profile.fast_inference:
        pool = profile.gpu_memory_utilization * gpu_gib
        kv_available = pool - weights - VLLM_OVERHEAD_GIB
        other = 0.0
    else:
        pool, kv_available, other = 0.0, 0.0, CUDA_CONTEXT_GIB
    if not hw.cuda:
        pool, kv_available, other = 0.0, 0.0, 0.0
    return MemoryEstimate(
        profile=profile.name,
        gpu=hw.gpu_name or "CPU",
        gpu_gib=gpu_gib,
        weights=weights,
        vllm_pool=pool,
        kv_cache_available=kv_available,
        kv_cache_needed=kv_needed,
        lora_and_optimizer=lora / GIB,
        activations=activations / GIB,
        logits=logits / GIB,
        other=other,
    )


def breakdown(est: MemoryEstimate) -> str:
    """A printed table of the estimate's parts, then the verdict line."""
    lines = [f"{name:<42} {gib:6.2f} GiB" for name, gib in est.rows()]
    lines.append(f"{'estimated peak':<42} {est.total:6.2f} GiB")
    return "\n".join([*lines, est.summary()])


def fit_table(profiles: list[Profile], gpus: dict[str, Hardware] | None = None) -> str:
    """One line per profile on its target GPU (TARGET_GPU), for the README."""
    gpus = gpus or TARGET_GPU
    lines = [f"{'profile':<8} {'GPU':<24} {'estimate':>9} {'of':>6}  verdict"]
    for p in profiles:
        if p.name not in gpus:
            continue
        est = estimate(p, gpus[p.name])
        lines.append(
            f"{p.name:<8} {est.gpu:<24} {est.total:>5.1f} GiB {est.gpu_gib:>5.1f}  {est.verdict}"
        )
    return "\n".join(lines)
