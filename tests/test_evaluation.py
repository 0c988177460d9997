"""Evaluation: hand-computed statistics, and base vs trained on identical prompts and settings."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from helpers.evaluation import (
    AdapterMissingError,
    DecodingSettings,
    Generation,
    compare_runs,
    decoding_settings,
    evaluate,
    flips,
    gains,
    generate_side,
    latest_results,
    load_results,
    per_problem_rows,
    require_adapter,
    results_markdown,
    save_results,
    score,
    summary_table,
)
from helpers.profiles import PROFILES
from helpers.stats import (
    describe_paired,
    mcnemar_p,
    paired_bootstrap,
    paired_test,
    pass_at_k,
    wilson_interval,
)
from helpers.storage import RunFolderError

SMOKE = PROFILES["smoke"]


# Wilson bounds worked by hand with z = 1.96:
#   centre = (p + z^2/2n) / (1 + z^2/n),  half = z sqrt(p(1-p)/n + z^2/4n^2) / (1 + z^2/n)
# e.g. 8/10: centre = 0.99208 / 1.38416 = 0.71674, half = 1.96 * 0.160012 / 1.38416 = 0.22658.
@pytest.mark.parametrize(
    ("successes", "n", "low", "high"),
    [(8, 10, 0.49016, 0.94332), (0, 10, 0.0, 0.27754), (10, 10, 0.72246, 1.0),
     (50, 100, 0.40383, 0.59617), (1, 4, 0.04559, 0.69936)],
)
def test_wilson_interval_matches_hand_computed_values(successes, n, low, high):
    got_low, got_high = wilson_interval(successes, n)
    assert got_low == pytest.approx(low, abs=2e-4)
    assert got_high == pytest.approx(high, abs=2e-4)


@pytest.mark.parametrize(("successes", "n"), [(0, 0), (5, 4), (-1, 4)])
def test_wilson_interval_rejects_impossible_counts(successes, n):
    with pytest.raises(ValueError):
        wilson_interval(successes, n)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    # pass@k = 1 - C(n-c, k) / C(n, k): 1 - 3/4, 1 - 3/6, 1 - 3/10, and certain / impossible cases.
    [(4, 1, 1, 0.25), (4, 1, 2, 0.5), (5, 2, 2, 0.7), (4, 0, 4, 0.0), (4, 3, 2, 1.0)],
)
def test_pass_at_k_matches_hand_computed_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_decoding_settings_are_frozen_and_pass_at_k_needs_sampling():
    settings = DecodingSettings(max_new_tokens=8)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.temperature = 1.0
    assert settings.greedy
    with pytest.raises(ValueError, match="temperature > 0"):
        DecodingSettings(max_new_tokens=8, num_samples=4)


def gen(text: str, num_tokens: int = 10, truncated: bool = False) -> list[Generation]:
    return [Generation(text=text, num_tokens=num_tokens, truncated=truncated)]


GOLDS = ["72", "5", "10", "3"]
COMPLETIONS = [
    gen("<reasoning>48 + 24 = 72</reasoning>\n<answer>72</answer>", 20),  # right, taught format
    gen("48 / 8 = 5, so the answer is 5.", 12),  # right number, no tags: lenient only
    gen("<reasoning>guess</reasoning>\n<answer>9</answer>", 8),  # tagged but wrong
    gen("one two three four five six", 32, truncated=True),  # no number: wrong, hit the limit
]


def test_score_counts_accuracy_format_length_and_truncation_by_hand():
    report = score(COMPLETIONS, GOLDS)
    assert report["n"] == 4
    assert report["strict"]["correct"] == 1 and report["strict"]["accuracy"] == 0.25
    assert report["lenient"]["correct"] == 2 and report["lenient"]["accuracy"] == 0.5
    assert (report["strict"]["ci_low"], report["strict"]["ci_high"]) == wilson_interval(1, 4)
    assert report["format_rate"] == 0.5
    assert report["truncation_rate"] == 0.25
    assert report["mean_tokens"] == (20 + 12 + 8 + 32) / 4
    assert report["tokens_p10_p50_p90_max"] == [8, 20, 32, 32]


def test_score_reports_pass_at_k_from_all_samples():
    samples = [gen("<answer>72</answer>") + gen("<answer>1</answer>"), gen("x") + gen("y")]
    report = score(samples, ["72", "5"])
    assert report["strict"]["accuracy"] == 0.5  # accuracy reads the first sample only
    assert report["strict"]["pass@2"] == pytest.approx((1.0 + 0.0) / 2)


def test_per_problem_rows_and_flips_classify_changes():
    fixed_5, fixed_10 = gen("<answer>5</answer>"), gen("<answer>10</answer>")
    trained = [COMPLETIONS[2], fixed_5, fixed_10, COMPLETIONS[3]]
    rows = per_problem_rows(["q1", "q2", "q3", "q4"], GOLDS, COMPLETIONS, trained)
    assert [r["change_strict"] for r in rows] == ["broken", "fixed", "fixed", "both wrong"]
    assert [r["change_lenient"] for r in rows] == ["broken", "both right", "fixed", "both wrong"]
    assert rows[1]["base_answer"] is None and rows[1]["trained_answer"] == "5"
    results = {"problems": rows}
    assert [r["id"] for r in flips(results)["fixed"]] == [1, 2]
    assert [r["id"] for r in flips(results, "lenient")["broken"]] == [0]


# McNemar by hand: 3 fixed, 0 broken -> 2 * (1/2)^3 = 0.25; 10 vs 2 -> 2 * (1+12+66)/4096.
@pytest.mark.parametrize(
    ("fixed", "broken", "p"),
    [(3, 0, 0.25), (0, 0, 1.0), (5, 5, 1.0), (10, 2, 2 * 79 / 4096), (2, 10, 2 * 79 / 4096)],
)
def test_mcnemar_matches_hand_computed_values(fixed, broken, p):
    assert mcnemar_p(fixed, broken) == pytest.approx(p)


def paired_rows(both: int, fixed: int, broken: int, neither: int) -> dict:
    pairs = [(1, 1)] * both + [(0, 1)] * fixed + [(1, 0)] * broken + [(0, 0)] * neither
    return {"problems": [{"base_strict": b, "trained_strict": t} for b, t in pairs]}


def test_paired_test_counts_flips_and_brackets_the_gain():
    # 200 problems: 40 fixed, 10 broken -> +15 points; SE of the paired gain ~ sqrt(50)/200 = 3.5.
    test = paired_test(paired_rows(50, 40, 10, 100))
    assert (test["n"], test["fixed"], test["broken"]) == (200, 40, 10)
    assert test["gain"] == pytest.approx(0.15)
    assert 0.07 < test["ci_low"] < 0.10 and 0.20 < test["ci_high"] < 0.23
    assert test["mcnemar_p"] < 1e-4
    assert "excludes 0" in describe_paired(test) and "40 fixed, 10 broken" in describe_paired(test)


def test_paired_test_on_a_balanced_change_includes_zero():
    test = paired_test(paired_rows(50, 12, 12, 126))
    assert test["gain"] == 0 and test["ci_low"] < 0 < test["ci_high"]
    assert "includes 0" in describe_paired(test)


def test_paired_statistics_reject_bad_input():
    with pytest.raises(ValueError, match="equal, non-empty"):
        paired_bootstrap([True], [True, False])
    with pytest.raises(ValueError, match=">= 0"):
        mcnemar_p(-1, 2)


def fake_results(base_strict: int, trained_strict: int, base_lenient: int, trained_lenient: int):
    def side(strict: int, lenient: int) -> dict:
        return {
            "n": 10, "format_rate": 0.5, "truncation_rate": 0.1, "mean_tokens": 12.0,
            "strict": {"accuracy": strict / 10, "ci_low": 0.0, "ci_high": 1.0},
            "lenient": {"accuracy": lenient / 10, "ci_low": 0.0, "ci_high": 1.0},
        }
    return {
        "settings": dataclasses.asdict(DecodingSettings(max_new_tokens=64)),
        "settings_fingerprint": "s", "prompts_fingerprint": "p",
        "scores": {"base": side(base_strict, base_lenient),
                   "trained": side(trained_strict, trained_lenient)},
        "problems": [{"id": 0, "question": "q, with a comma", "gold": "1"}],
    }


def test_gains_split_format_from_reasoning():
    # Strict 2 -> 7 of 10 (+50 points), lenient 6 -> 7 (+10): 40 points came from the format alone.
    got = gains(fake_results(2, 7, 6, 7))
    assert got == pytest.approx({"strict": 50.0, "lenient": 10.0, "format": 40.0})
    table = summary_table(fake_results(2, 7, 6, 7))
    assert [row["strict acc %"] for row in table] == [20.0, 70.0]


def test_results_round_trip_and_rerun_comparison(tmp_path):
    first, second = fake_results(2, 7, 6, 7), fake_results(2, 8, 6, 8)
    assert "first" in compare_runs(load_results(tmp_path), first)
    json_path, csv_path = save_results(first, tmp_path)
    assert load_results(tmp_path) == first
    assert csv_path.read_text().splitlines()[1] == '0,"q, with a comma",1'
    report = compare_runs(load_results(tmp_path), second)
    assert "Same prompts and decoding" in report
    assert "trained  strict:  70.0% ->  80.0%" in report
    changed = dict(second, prompts_fingerprint="other")
    assert "different prompts" in compare_runs(first, changed)


def test_latest_results_and_readme_table(tmp_path):
    with pytest.raises(FileNotFoundError, match="make course"):
        latest_results("smoke", tmp_path)
    for stamp, trained in (("20261201-100000", 7), ("20261202-100000", 9)):
        save_results(fake_results(2, trained, 6, trained), tmp_path / stamp / "smoke")
    newest = latest_results("smoke", tmp_path)
    assert newest.parts[-4] == "20261202-100000"
    text = results_markdown(load_results(newest.parent.parent))
    assert "| trained | 10 | 90.0 | 0.0-100.0 | 90.0 |" in text
    assert "greedy decoding, at most 64 new tokens" in text


def write_adapter(folder: Path, value: float = 1.0) -> Path:
    """A LoRA adapter folder in peft's layout, with one tiny tensor."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_text('{"base_model_name_or_path": "base-model"}')
    save_file({"lora_A": torch.full((2, 2), value)}, folder / "adapter_model.safetensors")
    return folder


def test_require_adapter_names_the_notebook_to_run(tmp_path):
    with pytest.raises(AdapterMissingError, match="run notebook 05 first"):
        require_adapter(tmp_path)
    write_adapter(tmp_path / "adapter")
    assert require_adapter(tmp_path) == tmp_path / "adapter"
    path = tmp_path / "adapter" / "adapter_model.safetensors"
    path.write_bytes(path.read_bytes()[:40])  # cut off: refused, never loaded
    with pytest.raises(RunFolderError, match="adapter_model.safetensors is cut off"):
        require_adapter(tmp_path)


# --- answers kept per model and per batch, so a rerun after a kill reuses them ------------------


class ChatTemplate:
    """Just enough tokenizer for build_prompts."""

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        return " | ".join(m["content"] for m in messages)


class Killed(BaseException):
    """A kill in the middle of a pass (not an Exception: nothing may catch it)."""


def counting_generate(calls: list, killed_at: int | None = None):
    """A deterministic generator that records its calls and can 'die' at call number `killed_at`."""

    def generate(model, tokenizer, prompts, settings, side, adapter_dir):
        calls.append((side, len(prompts)))
        if len(calls) == killed_at:
            raise Killed
        salt = 1 if side == "trained" else 0
        return [gen(f"<answer>{(len(p) + salt) % 20}</answer>") for p in prompts]

    return generate


ROWS = [{"question": f"What is {n} + 1?", "answer": f"{n} + 1 = {n + 1}\n#### {n + 1}"}
        for n in range(5)]
BATCHED = DecodingSettings(max_new_tokens=8, batch_size=2)  # 5 problems: batches of 2, 2, 1


def test_the_store_gives_the_same_results_and_a_rerun_generates_nothing(tmp_path, capsys):
    adapter = write_adapter(tmp_path / "adapter")
    plain = evaluate(None, ChatTemplate(), ROWS, BATCHED, adapter, generate=counting_generate([]))
    calls: list = []
    stored = evaluate(None, ChatTemplate(), ROWS, BATCHED, adapter,
                      generate=counting_generate(calls), store=tmp_path / "eval" / "answers")
    assert stored == plain
    assert calls == [("base", 2), ("base", 2), ("base", 1)] + [("trained", 2), ("trained", 2),
                                                               ("trained", 1)]
    assert "base: generating 5 answers, saved batch by batch in eval/answers/base-" in (
        capsys.readouterr().out)
    again: list = []
    rerun = evaluate(None, ChatTemplate(), ROWS, BATCHED, adapter,
                     generate=counting_generate(again), store=tmp_path / "eval" / "answers")
    assert again == [] and rerun == plain
    out = capsys.readouterr().out
    assert "base: reusing all 5 answers saved in eval/answers/base-" in out
    assert "trained: reusing all 5 answers" in out and "(same prompts, decoding and weights)" in out


def test_a_kill_in_the_trained_pass_keeps_the_base_pass(tmp_path, capsys):
    adapter, store = write_adapter(tmp_path / "adapter"), tmp_path / "eval" / "answers"
    with pytest.raises(Killed):  # dies in the trained pass's second batch
        evaluate(None, ChatTemplate(), ROWS, BATCHED, adapter,
                 generate=counting_generate([], killed_at=5), store=store)
    capsys.readouterr()
    calls: list = []
    results = evaluate(None, ChatTemplate(), ROWS, BATCHED, adapter,
                       generate=counting_generate(calls), store=store)
    assert calls == [("trained", 2), ("trained", 1)]
    out = capsys.readouterr().out
    assert "base: reusing all 5 answers" in out
    assert "trained: reusing 2 of 5 answers saved in eval/answers/trained-" in out
    assert "by a run that stopped; generating the other 3." in out
    plain = evaluate(None, ChatTemplate(), ROWS, BATCHED, adapter, generate=counting_generate([]))
    assert results == plain


def test_new_weights_or_a_cut_off_batch_are_generated_again(tmp_path, capsys):
    adapter, store = write_adapter(tmp_path / "adapter"), tmp_path / "eval" / "answers"
    evaluate(None, ChatTemplate(), ROWS, BATCHED, adapter, generate=counting_generate([]),
             store=store)
    write_adapter(adapter, value=2.0)  # 05 trained further: the trained answers are stale
    base_batch = next(store.glob("base-*")) / "000002.json"
    base_batch.write_text('{"prompts": "x", "answers": [[{"te')  # cut off mid-write
    calls: list = []
    evaluate(None, ChatTemplate(), ROWS, BATCHED, adapter, generate=counting_generate(calls),
             store=store)
    assert calls == [("base", 2), ("trained", 2), ("trained", 2), ("trained", 1)]
    assert "base: reusing 3 of 5 answers" in capsys.readouterr().out
    assert len(list(store.glob("trained-*"))) == 1  # the stale answers were removed


# --- The real pipeline on the tiny model ---------------------------------------------------


@pytest.fixture(scope="module")
def peft_model(random_lora_smoke_model):
    """The smoke model with LoRA whose B matrices are random, so the adapter visibly matters."""
    return random_lora_smoke_model(seed=0)


def test_base_and_trained_get_byte_identical_prompts_and_settings(peft_model, tmp_path):
    from helpers.data import load_gsm8k

    model, tokenizer = peft_model
    calls = []

    def recording_generate(model, tokenizer, prompts, settings, side, adapter_dir):
        calls.append({"side": side, "prompts": list(prompts), "settings": settings})
        return generate_side(model, tokenizer, prompts, settings, side, adapter_dir)

    rows = list(load_gsm8k("test", SMOKE, limit=3))  # two batches: 2 + 1 (left padding)
    settings = DecodingSettings(max_new_tokens=6, batch_size=2)
    results = evaluate(model, tokenizer, rows, settings, tmp_path, generate=recording_generate)

    assert [c["side"] for c in calls] == ["base", "trained"]
    base, trained = calls
    assert [p.encode() for p in base["prompts"]] == [p.encode() for p in trained["prompts"]]
    assert base["settings"] is trained["settings"] and base["settings"] == settings
    assert all(rows[i]["question"] in p for i, p in enumerate(base["prompts"]))
    assert results["example_prompt"] == base["prompts"][0]
    # The base side really ran with the adapter off: its answers differ from the trained ones.
    base_texts = [r["base_completion"] for r in results["problems"]]
    trained_texts = [r["trained_completion"] for r in results["problems"]]
    assert base_texts != trained_texts
    assert all(r["base_tokens"] <= 6 and r["trained_tokens"] <= 6 for r in results["problems"])
    assert results["scores"]["base"]["n"] == results["scores"]["trained"]["n"] == 3
    assert not math.isnan(results["scores"]["trained"]["mean_tokens"])


def test_decoding_settings_take_any_override():
    settings = decoding_settings(PROFILES["smoke"], max_new_tokens=64, temperature=0.7)
    assert settings.max_new_tokens == 64 and settings.temperature == 0.7
    smoke = PROFILES["smoke"]
    assert decoding_settings(smoke).max_new_tokens == smoke.max_completion_length


# --- Sampled accuracy beside greedy: what training's reward measures ----------------------------


def sampling_generate(calls: list):
    """Per side, a fixed share of right answers among each problem's samples: base 1 of 4 right,
    trained 3 of 4 on even problems (1 of 4 on odd ones); records what it was asked."""

    def generate(model, tokenizer, prompts, settings, side, adapter_dir):
        calls.append({"side": side, "prompts": list(prompts), "settings": settings})
        answers = []
        for i, prompt in enumerate(prompts):
            gold = prompt.split("What is ")[1].split(" + 1?")[0]
            right = 3 if side == "trained" and i % 2 == 0 else 1
            answers.append([Generation(f"<answer>{int(gold) + 1 if k < right else -1}</answer>",
                                       5, False) for k in range(settings.num_samples)])
        return answers

    return generate


def test_sampled_accuracy_scores_every_sample_of_both_sides_on_the_same_prompts(capsys):
    from helpers.evaluation import sampled_accuracy, sampled_settings

    calls: list = []
    settings = sampled_settings(DecodingSettings(max_new_tokens=8))
    assert (settings.temperature, settings.num_samples, settings.max_new_tokens) == (1.0, 4, 8)
    result = sampled_accuracy(None, ChatTemplate(), ROWS, settings, Path("unused"),
                              generate=sampling_generate(calls))
    assert [c["side"] for c in calls] == ["base", "trained"]
    assert calls[0]["prompts"] == calls[1]["prompts"] and calls[0]["settings"] is settings
    assert result["per_problem"]["base"] == [0.25] * 5
    assert result["per_problem"]["trained"] == [0.75, 0.25, 0.75, 0.25, 0.75]
    assert result["base"] == pytest.approx(0.25) and result["trained"] == pytest.approx(0.55)
    assert result["gain"] == pytest.approx(0.30)
    assert 0 < result["ci_low"] <= result["gain"] <= result["ci_high"] <= 0.5
    # maj@4: base's one right answer is outvoted by three "-1"; trained's three right ones win.
    assert result["maj"]["per_problem"] == {"base": [False] * 5,
                                            "trained": [True, False, True, False, True]}
    assert result["maj"]["gain"] == pytest.approx(0.6)
    # pass@4: every problem has at least one right sample on both sides.
    assert result["pass"]["per_problem"]["base"] == [1.0] * 5
    assert result["pass"]["gain"] == 0.0 == result["pass"]["ci_low"] == result["pass"]["ci_high"]
    assert "base, sampled: 20 answers (4 a problem)" in capsys.readouterr().out


@pytest.mark.parametrize(("answers", "right"), [
    (["7", "7", "8", "9"], True),  # most samples say 7
    (["8", "7", "7", "8"], False),  # a tie goes to the answer seen first
    (["8", None, None, "7 "], False),  # no answer abstains; 8 came first
    ([None, None, None, " 7"], True),  # one vote is a majority when the rest abstain
    ([None, None, None, None], False),
])
def test_majority_right_votes_over_the_answers_the_samples_give(answers, right):
    from helpers.evaluation import majority_right

    samples = [Generation("no tags" if a is None else f"<answer>{a}</answer>", 3, False)
               for a in answers]
    assert majority_right(samples, "7") is right


def test_sampled_accuracy_refuses_greedy_settings():
    from helpers.evaluation import sampled_accuracy

    with pytest.raises(ValueError, match="sampled_settings"):
        sampled_accuracy(None, ChatTemplate(), ROWS, DecodingSettings(max_new_tokens=8),
                         Path("unused"), generate=sampling_generate([]))


def sampled_summary(base: list[float], trained: list[float]) -> dict:
    """sampled_accuracy's result for per-problem right shares (maj and pass copy the shares)."""
    from helpers.evaluation import _paired, sampled_settings

    found = {**_paired(base, trained), "per_problem": {"base": base, "trained": trained}}
    return {"settings": dataclasses.asdict(sampled_settings(DecodingSettings(8))), "n": len(base),
            **found, "maj": found, "pass": found}


def with_problems(results: dict, base: list[bool], trained: list[bool]) -> dict:
    rows = [{"base_strict": b, "trained_strict": t} for b, t in zip(base, trained, strict=True)]
    return {**results, "problems": rows}


# 20 problems. Greedy: base right on 0-5, trained on 0-5 and 10-19 (+50 points).
GREEDY_BASE = [i < 6 for i in range(20)]
GREEDY_TRAINED = [i < 6 or i >= 10 for i in range(20)]


@pytest.mark.parametrize(("trained_shares", "reading"), [
    # the samples barely move: the greedy gain is larger on problem after problem
    ([0.25] * 18 + [0.5, 0.5], "training sharpened the most likely answer more than"),
    # the samples gain about as much, some where the greedy answer moved and some elsewhere
    ([0.75] * 5 + [0.25] * 5 + [1.0] * 10, "the two gains cannot be told apart"),
    # the samples gain everywhere, even where the greedy answer stays
    ([1.0] * 20, "the samples gained more than the most likely answer"),
])
def test_describe_sampled_tests_sharpening_paired_by_problem(trained_shares, reading):
    from helpers.evaluation import describe_sampled, sharpening

    results = with_problems(fake_results(3, 8, 3, 8), GREEDY_BASE, GREEDY_TRAINED)
    results["scores"]["base"]["strict"]["accuracy"] = 0.3
    results["scores"]["trained"]["strict"]["accuracy"] = 0.8
    sampled = sampled_summary([0.25] * 20, trained_shares)
    sharper = sharpening(sampled, results)
    expected = 0.5 - (sum(trained_shares) / 20 - 0.25)
    assert sharper["difference"] == pytest.approx(expected)
    assert sharper["ci_low"] <= sharper["difference"] <= sharper["ci_high"]
    lines = describe_sampled(sampled, results).splitlines()
    assert lines[0].startswith("20 problems, strict")
    assert lines[1].startswith("greedy, 1 answer") and "+50.0 points" in lines[1]
    assert lines[2].startswith("sampled, T=1, 4 answers") and "25.0%" in lines[2]
    assert lines[3].startswith("maj@4, T=1") and lines[4].startswith("pass@4, T=1")
    assert "paired 95% interval" in lines[2] and "paired 95% interval" in lines[4]
    assert f"paired by problem: {100 * expected:+.1f} points" in lines[5]
    assert lines[5].endswith(f": {reading}.") or f": {reading} " in lines[5]
