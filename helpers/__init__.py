"""The course's code, which the notebooks import: each module holds one thing, written once.

    module           what it holds                                            notebooks

The lesson: what a notebook teaches, shown on its page
    data             GSM8K rows, the chat prompt, the gold answer             02, 05, 06
    synthetic        the smoke profile's offline problems, GSM8K's format     04
    rewards          every reward function and its weight                     03, 05, 06
    policy_gradient  REINFORCE with a baseline by hand: one update, a loop    04
    grpo_scratch     the GRPO loss and one training step, from scratch        03, 04, 08, 09
    trl_compare      the from-scratch loss and gradient against trl's         08
    memory_probe     measured memory of the tiny model; bench/grpo_vs_trl     08
    toy_r1           DeepSeek-R1's recipe on a toy task                       08, 09
    ablations        one knob moved over seeds: arms, runs, verdicts, plots   11

The page: what every notebook's first cells and checks use
    prelude, session the first cells: warnings, hardware, profile, seed       all
    course           where the course is published, what a notebook installs  all
    journey          the Colab journey in minutes, per notebook, adding up    00
    stack            the installed versions against the pins                  00
    show, diagrams   code shown from here; concept diagrams drawn by code     01-08
    checking         the checker of a learner's edited cell                   08

The run's engine: a T4 run that survives a disconnect (05 trains, 06 evaluates, 07 exports)
    profiles, hardwaresizes per machine, and what the machine is               all
    memory           the peak-memory estimate before anything loads           01, 05, 07, 08, 10
    loading          unsloth's loading calls; a trained adapter loaded back   01, 02, 05-07
    grpo_config      the GRPOConfig from a profile, checked before loading    05, 10
    grpo_run         the trainer assembled once, with the standard callbacks  05
    callbacks        held-out accuracy, live plot, adapter, timer, samples    05
    resume           whole checkpoints, resuming, the saved adapter and log   05, 06
    run_folder       the run folder's layout, on Drive or local; finding it   05-07
    storage          writes a kill cannot leave half-done; storage errors     05-07
    logs, health     trl's log history, and the health check that reads it    05, 06
    plotting         the training figure and the other pictures               02, 03, 05, 06
    evaluation       generation, scoring, the answer cache: base vs trained   05-07
    stats            intervals, pass@k, paired tests, seed-to-seed verdicts   06, 07, 09, 11
    export           merge, GGUF, the merged model in plain transformers      07
    launch           one process with unsloth, or several with peft           10
    smoke_model      the committed smoke model, checked before use            CPU
    smoke_promise    what GRPO must add on the smoke profile                  06

The repository's own machinery (cited numbers, the GPU-call registry, the smoke runs and recipe,
fault injection) lives in `tools/`, which nothing here imports.
"""
