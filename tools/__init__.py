"""The repository's own machinery: what keeps the course honest, never imported by a notebook.

- `cited_numbers`: the figures README, docs and notebook prose cite, computed from their sources.
- `gpu_calls`: the registry of GPU-only call sites that tests/test_gpu_contracts.py checks.
- `smoke_runs`: the runs that check the smoke promise, on several CPU kernel paths, and mutations.
- `smoke_recipe`: how the committed smoke model was built, and rebuilds it.
- `faults`: fault injection for the crash tests, plugged into scripts/train_grpo.py by one hook.

`helpers/` never imports this package (tests/test_imports.py checks it).
"""
