"""Every notebook ends the same way: Summary, Exercises, Solutions that run, and exact Sources.

Also checked: the header's timing line, no vague attributions ("a popular notebook") where a
source can be named and linked, notebook 03 showing the code of every training reward, and the
`Precision:` line of every notebook agreeing with the trainer's flags.
"""

import ast
import re

import nbformat
import pytest

from helpers.paths import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
TAIL = ["Summary", "Exercises", "Solutions", "Sources"]
HEADING = re.compile(r"^## (.+?)\s*$", re.M)
EXERCISE = re.compile(r"^(\d+)\. ", re.M)
SOLUTION = re.compile(r"^### Solution (\d+)\b", re.M)  # may follow "## Solutions"
LINK = re.compile(r"\[([^\]]+)\]\((\S+?)\)(?=[\s:;,.]|$)")
ARXIV = re.compile(r"https://arxiv\.org/abs/\d{4}\.\d{4,5}")
CITATION = re.compile(r"\([^()]+, (?:19|20)\d\d\)$")  # "Title (Authors, year)"
TIME_LINE = re.compile(  # the estimate is helpers.journey.time_line's (tests/test_journey.py)
    r"^\*\*Time:\*\* ≈ [\d.]+(?:-[\d.]+)? min on (?:a T4|any runtime) \([^)]*estimated\) "
    r"· CPU smoke "
    r"<!-- fig:cpu_seconds\.(\d\d) -->[^<]*<!-- /fig --> \(measured\)$",
    re.M,
)
VAGUE = ["a popular notebook", "peers' runs", "peers’ runs", "one book", "one popular"]


def section_text(nb: nbformat.NotebookNode, title: str) -> str:
    """The markdown from `## title` to the next `## ` heading (within its cell)."""
    for cell in nb.cells:
        if cell.cell_type == "markdown" and f"## {title}" in cell.source:
            rest = cell.source.split(f"## {title}", 1)[1]
            return HEADING.split(rest, maxsplit=1)[0]
    return ""


def tail_problems(nb: nbformat.NotebookNode) -> list[str]:
    """The four closing sections exist, in order, with Sources the last thing in the notebook."""
    found = [(i, m.start(), m.group(1)) for i, c in enumerate(nb.cells) if c.cell_type == "markdown"
             for m in HEADING.finditer(c.source) if m.group(1) in TAIL]
    names = [name for _, _, name in found]
    if names != TAIL:
        return [f"the closing sections are {names}, expected exactly {TAIL} in this order"]
    last_cell, last_start, _ = found[-1]
    after = nb.cells[last_cell].source[last_start + 3:]
    if last_cell != len(nb.cells) - 1 or HEADING.search(after):
        return ["## Sources must be the last section and the last cell"]
    return []


def solution_problems(nb: nbformat.NotebookNode) -> list[str]:
    """k numbered exercises, `### Solution 1..k`, each followed by code that ran without error."""
    numbers = [int(n) for n in EXERCISE.findall(section_text(nb, "Exercises"))]
    k = len(numbers)
    problems = [] if numbers == list(range(1, k + 1)) and k else [
        f"the Exercises list must be numbered 1..k, found {numbers}"]
    starts = [(i, int(m.group(1))) for i, c in enumerate(nb.cells) if c.cell_type == "markdown"
              for m in [SOLUTION.search(c.source)] if m]
    if [n for _, n in starts] != list(range(1, k + 1)):
        problems.append(f"{k} exercises but solutions {[n for _, n in starts]}: "
                        "add a markdown cell '### Solution N' for each exercise, in order")
    for index, (start, number) in enumerate(starts):
        end = starts[index + 1][0] if index + 1 < len(starts) else len(nb.cells)
        block = nb.cells[start + 1:end]
        block = block[:next((j for j, c in enumerate(block) if c.cell_type == "markdown"
                             and HEADING.search(c.source)), len(block))]
        code = [c for c in block if c.cell_type == "code"]
        if not any(c.outputs for c in code):
            problems.append(f"Solution {number} has no code cell with stored outputs")
        if any(c.execution_count is None for c in code):
            problems.append(f"Solution {number} has a code cell that never ran: re-execute it")
        if any(o.output_type == "error" for c in code for o in c.outputs):
            problems.append(f"Solution {number} has a code cell that stored an error")
    return problems


def source_problems(nb: nbformat.NotebookNode) -> list[str]:
    """Sources has links; every arXiv link is an abs page with a 'Title (Authors, year)' text."""
    problems = [] if LINK.search(section_text(nb, "Sources")) else ["## Sources has no link"]
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for text, url in LINK.findall(cell.source):
            if "arxiv.org" in url and not ARXIV.fullmatch(url):
                problems.append(f"arXiv link {url}: use https://arxiv.org/abs/<id>")
            elif "arxiv.org" in url and not CITATION.search(text):
                problems.append(f"arXiv link text {text!r}: write it as 'Title (Authors, year)'")
    return problems


def header_problems(nb: nbformat.NotebookNode, name: str) -> list[str]:
    """The title cell carries the timing line, with this notebook's number in its figure key."""
    match = TIME_LINE.search(nb.cells[0].source)
    if not match:
        return ["the title cell needs '**Time:** ≈ N min on ... (... estimated) · CPU smoke "
                "<!-- fig:cpu_seconds.NN -->M s<!-- /fig --> (measured)': make sync-notebooks "
                "writes the estimate"]
    if match.group(1) != name[:2]:
        return [f"the timing line's key is cpu_seconds.{match.group(1)}, expected {name[:2]}"]
    return []


def vague_problems(nb: nbformat.NotebookNode) -> list[str]:
    """No attribution a learner cannot follow: name the source and link it."""
    prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown").lower()
    return [f"vague reference {phrase!r}: name the source and link it"
            for phrase in VAGUE if phrase in prose]


def teaching_problems(nb: nbformat.NotebookNode, name: str) -> list[str]:
    """Everything this file checks, as one list of fixable sentences."""
    return (tail_problems(nb) + solution_problems(nb) + source_problems(nb)
            + header_problems(nb, name) + vague_problems(nb))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_teaches_with_solutions_and_sources(path):
    problems = teaching_problems(nbformat.read(path, as_version=4), path.name)
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


def shown_names(nb: nbformat.NotebookNode) -> list[str]:
    """The names passed to show_source(...) anywhere in the notebook, in order, repeats kept."""
    cells = [c.source for c in nb.cells if c.cell_type == "code" and "show_source(" in c.source]
    return [arg.id for source in cells for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "show_source"
            for arg in node.args if isinstance(arg, ast.Name)]


def test_03_shows_every_training_reward_once():
    from helpers.rewards import REWARD_FUNCS

    shown = shown_names(nbformat.read(ROOT / "notebooks" / "03_reward_design.ipynb", as_version=4))
    counts = {f.__name__: shown.count(f.__name__) for f in REWARD_FUNCS}
    assert all(n == 1 for n in counts.values()), f"show each reward once in 03: {counts}"


def _notebook(*cells: nbformat.NotebookNode) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = list(cells)
    return nb


def _ran(source: str, text: str = "ok\n") -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source, execution_count=1)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    return cell


GOOD = [
    nbformat.v4.new_markdown_cell(
        "# 42 · A notebook\n\n**Time:** ≈ 2-5 min on a T4 (2-3 install, 0-2 work; estimated) "
        "· CPU smoke <!-- fig:cpu_seconds.42 -->3 s<!-- /fig --> (measured)"),
    nbformat.v4.new_markdown_cell("## Summary\n- a point\n\n## Exercises\n1. one\n2. two"),
    nbformat.v4.new_markdown_cell("## Solutions\n\n### Solution 1\nWhy."),
    _ran("print(1)"),
    nbformat.v4.new_markdown_cell("### Solution 2"),
    _ran("print(2)"),
    nbformat.v4.new_markdown_cell(
        "## Sources\n- [LoRA (Hu et al., 2021)](https://arxiv.org/abs/2106.09685)"),
]


def test_a_complete_notebook_passes():
    assert teaching_problems(_notebook(*GOOD), "42_x.ipynb") == []


def test_each_missing_piece_is_named():
    missing_solution = _notebook(*GOOD[:4], GOOD[6])
    assert any("2 exercises but solutions [1]" in p
               for p in teaching_problems(missing_solution, "42_x.ipynb"))
    failed = _notebook(*GOOD)
    failed.cells[5] = nbformat.v4.new_code_cell("1/0", execution_count=1)
    failed.cells[5].outputs = [nbformat.v4.new_output("error", ename="ZeroDivisionError",
                                                      evalue="", traceback=[])]
    assert any("stored an error" in p for p in teaching_problems(failed, "42_x.ipynb"))
    pdf = _notebook(*GOOD[:6], nbformat.v4.new_markdown_cell(
        "## Sources\n- [LoRA (Hu et al., 2021)](https://arxiv.org/pdf/2106.09685)"))
    assert any("use https://arxiv.org/abs/" in p for p in teaching_problems(pdf, "42_x.ipynb"))
    assert any("expected 07" in p for p in teaching_problems(_notebook(*GOOD), "07_x.ipynb"))
    vague = _notebook(*GOOD)
    vague.cells[2] = nbformat.v4.new_markdown_cell("### Solution 1\nAs one book says.")
    assert any("'one book'" in p for p in teaching_problems(vague, "42_x.ipynb"))


def test_sources_must_come_last():
    late = _notebook(*GOOD[:2], GOOD[6], *GOOD[2:6])
    assert any("in this order" in p for p in teaching_problems(late, "42_x.ipynb"))
    trailing = _notebook(*GOOD, _ran("print(3)"))
    assert any("must be the last" in p for p in teaching_problems(trailing, "42_x.ipynb"))


@pytest.mark.parametrize("machine", ["CPU_ONLY", "TESLA_T4", "A100_40GB"])
def test_the_precision_line_agrees_with_the_trainer_flags(machine, tmp_path):
    import helpers.hardware
    from helpers.grpo_config import grpo_settings
    from helpers.profiles import PROFILES
    from helpers.session import describe_precision

    hw = getattr(helpers.hardware, machine)
    settings = grpo_settings(PROFILES["smoke"], hw, tmp_path)
    precision = hw.precision
    flags = f"(bf16={settings['bf16']}, fp16={settings['fp16']})"
    assert describe_precision(hw).startswith(f"trainer {precision} {flags}")


def test_each_notebooks_first_output_names_the_run_its_page_records():
    """session.start prints the run (date, Python, stack, seed) as a notebook's first output; the
    web book's line under the title reads the same run from the notebook's metadata."""
    import json
    import re

    from scripts import provenance

    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = json.loads(path.read_text())
        run = nb["metadata"].get(provenance.KEY)
        assert run, f"{path.name}: no run recorded; run `make execute-notebooks`"
        printed = [line for cell in nb["cells"] if cell["cell_type"] == "code"
                   for out in cell.get("outputs", []) for line in "".join(out.get("text", ""))
                   .splitlines() if line.startswith("Run      : ")]
        assert printed, f"{path.name}: session.start's Run line is not in the stored outputs"
        stack = ", ".join(f"{name} {run['packages'][name]}" for name in ("torch", "transformers",
                                                                          "trl", "peft"))
        expected = f"Run      : {run['date']}, Python {run['python']}, {stack}; seed {run['seed']}"
        assert printed[0] == expected, path.name
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", run["date"])


def test_09_states_in_words_what_the_benchmark_found():
    """Notebook 09's reading of the controls is the benchmark's verdict, computed, word for word."""
    import json

    from helpers.toy_r1 import grpo_verdict

    seeds = json.loads((ROOT / "runs" / "bench" / "toy_r1.json").read_text())["seeds"]
    verdict = grpo_verdict(seeds)
    nb = nbformat.read(ROOT / "notebooks" / "09_r1_recipe_toy.ipynb", as_version=4)
    prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert verdict in prose, (
        f"runs/bench/toy_r1.json now says {verdict!r}, which notebook 09's section 4 does not say: "
        "rewrite its reading of the tables (and its summary) to match")
    assert "margin over it is what the checker taught" not in prose
