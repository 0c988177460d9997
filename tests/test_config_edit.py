"""A learner's edit of notebook 05's config cell trains, and the cell names the change.

The notebook runs in a fresh kernel up to its training cell (MAX_STEPS = 2, the smoke profile, a
temporary run folder), with `beta=0.0` changed to `beta=0.04` in the `GRPOConfig(...)` cell, as
Exercise 2 asks.
"""

import json
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "05_grpo_training.ipynb"
TRAINS = "result = train_or_resume(trainer)"
REPORT = ("import json\n"
          "print(json.dumps([e.get('kl') for e in trainer.state.log_history if 'loss' in e]))")


def test_an_edited_beta_trains_and_the_config_cell_names_it(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_PROFILE", "smoke")
    monkeypatch.setenv("GRPO_RUN_DIR", str(tmp_path))  # the course's own run stays untouched
    nb = nbformat.read(NOTEBOOK, as_version=4)
    end = next(i for i, c in enumerate(nb.cells) if TRAINS in c.source)
    nb.cells = nb.cells[: end + 1] + [nbformat.v4.new_code_cell(REPORT)]
    params = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    params.source += "\nMAX_STEPS = 2"
    config = next(c for c in nb.cells if c.source.startswith("from trl import GRPOConfig"))
    assert config.source.count("    beta=0.0,") == 1
    config.source = config.source.replace("    beta=0.0,", "    beta=0.04,")
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()

    said = "".join(o.get("text", "") for o in config.outputs if o.output_type == "stream")
    assert "Your changes to the course's settings: beta=0.04 (course: 0.0)\n" in said
    kl = json.loads(nb.cells[-1].outputs[0]["text"])
    assert len(kl) == 2 and all(value is not None for value in kl)  # trl logs kl when beta > 0
    assert (tmp_path / "smoke" / "adapter" / "adapter_config.json").is_file()
