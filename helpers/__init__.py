"""The course's code, which the notebooks import: each module holds one thing, written once.

Four groups: the task imports nothing else of the course, and the engine imports neither the page
nor a lesson. The notebooks column lists the notebooks whose cells import the module; "-": only
other modules do. tests/test_imports.py holds the groups and the column to the code.

    module           what it holds                                              notebooks

The task: GSM8K's data and the rewards that score it, which everything above stands on
    data             GSM8K rows, the chat prompt, the gold answer               01, 02, 05-07
    synthetic        the smoke profile's offline problems, GSM8K's format       04
    rewards          the reward registry: each function, its weight and rule    01, 03, 05-07, 11

The engine: a T4 run that survives a disconnect (05 trains, 06 evaluates, 07 exports)
    profiles         sizes and knobs per machine; what stops a run      00-02, 05, 07, 08, 10
    hardware         what the machine is, and the precision it trains in        00, 01, 05
    paths            the course's root and caches; Colab or not               00, 01, 05, 07, 09, 10
    memory           the peak-memory estimate before anything loads             01, 05, 07, 08, 10
    loading          unsloth's loading calls; a trained adapter loaded back     00-02, 05-07
    launch           the plan: one process with unsloth, or several with peft   10
    grpo_config      the GRPOConfig from a profile, checked before loading      05, 10
    grpo_run         the trainer assembled once, with the course's callbacks    05
    callbacks        held-out accuracy, live plot, adapter, timer, samples      05
    resume           whole checkpoints, resuming, the saved adapter and log     05, 06
    run_folder       the run folder's layout, on Drive or local; finding it     05-07
    one_runtime      06 and 07 run from 05's runtime: one install, no Drive     05
    storage          writes a kill cannot leave half-done; storage errors       -
    logs             trl's log history: the keys the course reads               06
    health           the health check that reads the log                        05
    plotting         the training figure and the other pictures                 02, 03, 05, 06
    evaluation       generation, scoring, the answer cache: base vs trained     05-07
    stats            intervals, pass@k, paired tests, seed-to-seed verdicts     05-07, 09, 11
    export           merge, GGUF, the merged model in plain transformers        07
    smoke_model      the committed smoke model, checked before use              -
    smoke_promise    what GRPO must add on the smoke profile                    06

The page: what every notebook's first cells and checks use
    prelude          before unsloth: harmless warnings off, one CPU thread      00-11
    session          the first cell: hardware, profile, seed, said aloud        00-11
    course           the notebooks table; where the course is published         00
    journey          the Colab journey in minutes, per notebook, adding up      00
    stack            the installed versions against the pins                    00
    show             code shown on the page from here                           01-04, 06-08
    diagrams         concept diagrams drawn by code                             01, 04, 05, 08
    checking         the checker of a learner's edited cell                     08

The lessons: what one notebook teaches, on its page; only its notebook and bench/ import it
    policy_gradient  REINFORCE with a baseline by hand: one update, a loop      04
    grpo_scratch     the GRPO loss and one training step, from scratch          03, 04, 08, 09
    trl_compare      the from-scratch loss and gradient against trl's           08
    memory_probe     measured memory of the tiny model; bench/grpo_vs_trl       08
    toy_r1           DeepSeek-R1's recipe on a toy task                         08, 09
    lab              one knob moved over seeds: arms, runs, verdicts, plots     11

The repository's own machinery (cited numbers, the GPU-call registry, the smoke runs and recipe,
fault injection) lives in `tools/`, which nothing here imports.
"""
