"""docs/colab.md's install table, from `helpers.course.NOTEBOOKS` and the locks.

A page cannot run code, so docs/colab.md keeps a copy of this table; tests/test_install_table.py
fails when the copy is not this one. Print it with `python -m tools.install_table`.
"""

from __future__ import annotations

from helpers.course import COLAB_GPU, NOTEBOOKS, Install, lock_pins

WHAT: dict[Install, str] = {
    "full": ("`locks/t4.txt` (or `ampere.txt`): the whole GPU stack, torch {torch}, vLLM {vllm}, "
             "unsloth; {count} packages"),
    "light": ("`locks/light.txt`: `requirements.txt` without unsloth, and what it pulls in, at the "
              "GPU lock's versions ({count} packages: transformers, trl, peft, datasets, "
              "accelerate, bitsandbytes, math-verify, matplotlib, ...), on top of **Colab's own "
              "torch**"),
}
RUNTIME: dict[Install, str] = {
    "full": f'`"accelerator": "GPU"`, `"colab": {{"gpuType": "{COLAB_GPU}"}}`',
    "light": "none: any runtime",
}


def install_table() -> str:
    """The markdown table: per install, its notebooks (numbered in reading order) and what it is."""
    rows = ["| install | notebooks | what it installs | Colab runtime asked for |",
            "|---|---|---|---|"]
    for install in ("full", "light"):
        names = [f"{number:02d} {name}" for number, (name, book) in enumerate(NOTEBOOKS.items())
                 if book.install == install]
        pins = lock_pins(install)
        what = WHAT[install].format(torch=pins.get("torch"), vllm=pins.get("vllm"),
                                    count=len(pins))
        rows.append(f"| {install} | {', '.join(names)} | {what} | {RUNTIME[install]} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(install_table())
