"""Memory fit: the estimator's verdict for each GPU profile on its target GPU (and on an L4).

Prints, for every GPU profile, the estimated peak GPU memory, the GPU's memory and the verdict
(fits / tight / won't fit), then each part of the estimate. Writes runs/bench/memory_fit.json.
No GPU is needed: the estimate comes from the model's shape and the profile's knobs
(helpers/memory.py, checked against peers' printed figures in tests/test_memory.py).

    .venv/bin/python -m bench.memory_fit
"""

from __future__ import annotations

from bench._results import write_result
from helpers.hardware import TESLA_T4
from helpers.memory import NVIDIA_L4, TARGET_GPU, breakdown, estimate, fit_table
from helpers.profiles import PROFILES


def main() -> int:
    gpu_profiles = [p for p in PROFILES.values() if p.name in TARGET_GPU]
    print("Each profile on its target GPU:")
    print(fit_table(gpu_profiles))
    results = []
    for profile in gpu_profiles:
        for hw in {TARGET_GPU[profile.name], TESLA_T4, NVIDIA_L4}:
            est = estimate(profile, hw)
            results.append({
                "profile": profile.name,
                "gpu": est.gpu,
                "target": hw == TARGET_GPU[profile.name],
                "gpu_gib": round(est.gpu_gib, 2),
                "estimate_gib": round(est.total, 2),
                "verdict": est.verdict,
                "advice": est.advice(),
                "parts_gib": {name: round(gib, 3) for name, gib in est.rows()},
            })
    for profile in gpu_profiles:
        print(f"\n{profile.name} on {TARGET_GPU[profile.name].gpu_name}:")
        print(breakdown(estimate(profile, TARGET_GPU[profile.name])))
    results.sort(key=lambda r: (r["profile"], r["gpu"]))
    write_result("memory_fit", results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
