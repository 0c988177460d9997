"""Notebook 11's ablation lab: what each GRPO setting does, and a learner's own arm in one cell.

An arm changes one thing in the course's smoke run (`arms`). `engine.train_and_score` trains the
smoke model once with it and scores it (with `lab=True`: on the lab's census of the 100 sums,
`problems`, with held-out accuracy along the run and each problem's result); `runs` runs an arm
over seeds. bench/ablations.py runs the grid; `verdicts.summarize` judges each arm against its
reference in four words, with Holm and Benjamini-Hochberg over the grid; `design` measures what
the grid can tell apart; `calibration` measures how often the verdicts go wrong on the course's
arm alone (A/A splits of a pool of seeds), and the paired difference on the null arm beside it;
`groups` is the dead-group calculator; `tables` and `plots` show it. `learner.arm_from` and
`reference.try_arm` let a learner bring a reward or a setting and get a verdict against the
course's arm, stored (if it was run with the present course settings and this machine reproduces
it) or run here.
"""

from helpers.lab.arms import (
    ARMS,
    COURSE,
    KNOBS,
    NO_OPS,
    NOT_CONFIG,
    NULL_ARM,
    Arm,
    ArmError,
    UnknownArmError,
    arm,
    arm_overrides,
    course_value,
    knob_arms,
    question_alone,
    random_reward,
    reward_setup,
)
from helpers.lab.design import design
from helpers.lab.engine import CURVE_EVERY, SIGNALS, signals, train_and_score
from helpers.lab.groups import dead_group_fit, dead_group_share, fit_spread
from helpers.lab.learner import PROBES, arm_from, audit_table, probe_rewards, reward_audit
from helpers.lab.plots import generations_per_step, plot_ablation, plot_curves, plot_dead_groups
from helpers.lab.problems import coverage, fact_of, lab_problems
from helpers.lab.reference import (
    GRID_FILE,
    POOL_FILE,
    StaleGridError,
    course_settings,
    load_grid,
    load_reference_runs,
    local_reference,
    reference_cache,
    settings_key,
    stale_note,
    stored_reference,
    try_arm,
)
from helpers.lab.runs import lab_row, run_seeds
from helpers.lab.tables import (
    curve_table,
    design_lines,
    grid_markdown,
    grid_table,
    signal_table,
    t4_cost,
)
from helpers.lab.verdicts import area_under_curve, family, reference_check, summarize

__all__ = [
    "ARMS", "COURSE", "CURVE_EVERY", "GRID_FILE", "KNOBS", "NO_OPS", "NOT_CONFIG", "NULL_ARM",
    "POOL_FILE", "PROBES", "SIGNALS", "Arm", "ArmError", "StaleGridError", "UnknownArmError",
    "area_under_curve", "arm", "arm_from", "arm_overrides", "audit_table", "course_settings",
    "course_value", "coverage", "curve_table", "dead_group_fit", "dead_group_share", "design",
    "design_lines", "fact_of", "family", "fit_spread", "generations_per_step", "grid_markdown",
    "grid_table", "knob_arms", "lab_problems", "lab_row", "load_grid", "load_reference_runs",
    "local_reference", "plot_ablation", "plot_curves", "plot_dead_groups", "probe_rewards",
    "question_alone", "random_reward", "reference_cache", "reference_check", "reward_audit",
    "reward_setup", "run_seeds", "settings_key", "signal_table", "signals", "stale_note",
    "stored_reference", "summarize", "t4_cost", "train_and_score", "try_arm",
]
