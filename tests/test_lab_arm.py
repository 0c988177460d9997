"""A learner's own arm, end to end on the smoke profile: a reward written in a cell (here, in the
test's body: a function no other process could import), registered with one call, trained over
seeds beside the course's arm and judged in four words, on a short grid."""

import pytest

from helpers.stats import VERDICTS


def test_a_reward_written_in_a_cell_gets_a_verdict(tmp_path, monkeypatch, capsys):
    import unsloth  # noqa: F401  (before trl, as the notebook's first cells do)

    from helpers.lab import arm_from, local_reference, try_arm
    from helpers.rewards import REWARDS, Reward, extract_answer

    monkeypatch.setenv("GRPO_COURSE_CACHE", str(tmp_path))  # the reference runs are cached there

    def off_by_one(completions, answer, **kwargs):
        """Half credit for an answer one away from the gold one."""
        scores = []
        for completion, gold in zip(completions, answer, strict=True):
            said = extract_answer(completion[0]["content"]) or ""
            near = said.lstrip("-").isdigit() and abs(int(said) - int(gold)) <= 1
            scores.append(1.0 if said == gold else 0.5 if near else 0.0)
        return scores

    mine = arm_from("off_by_one", rewards=(Reward(off_by_one, 2.0), *REWARDS[1:]))
    result = try_arm(mine, seeds=2, steps=2, grid={"rows": []}, problems=40)
    out = capsys.readouterr().out
    assert result["verdict"]["verdict"] in VERDICTS
    assert [r["seed"] for r in result["rows"]] == [3407, 3408]
    assert len(result["reference"]) == 2 and result["reference"][0]["arm"] == "course"
    assert all(len(r["correct"]) == 40 and r["curve"][-1][0] == 2 for r in result["rows"])
    assert "[2/2] off_by_one, seed" in out and "all done in" in out
    verdict_line, paired_line = out.strip().splitlines()[-2:]
    assert verdict_line.startswith("off_by_one: ")
    # Both sides ran seeds 3407 and 3408: the difference paired by seed is printed beside it.
    paired = result["paired"]
    assert paired["seeds"] == [3407, 3408] and paired_line.startswith("Paired by seed (2 seeds")
    by_seed = [a["gain"] - b["gain"] for a, b in zip(result["rows"], result["reference"],
                                                      strict=True)]
    assert paired["difference"] == pytest.approx(sum(by_seed) / 2)
    # The reference runs are kept: the next arm on this machine does not run them again.
    again, _, _ = local_reference([], 2, unstored=2, problems=40)
    assert "The course's arm, here" not in capsys.readouterr().out
    assert again == result["reference"]


def test_a_broken_reward_in_a_cell_stops_before_training(tmp_path, monkeypatch):
    from helpers.lab import ArmError, arm_from, reference, try_arm
    from helpers.rewards import Reward

    def count_digits(completions, **kwargs):
        return [sum(ch.isdigit() for ch in c) for c in completions]  # c is a message list

    monkeypatch.setattr(reference, "run_seeds", lambda *a, **k: pytest.fail("trained"))
    with pytest.raises(ArmError) as error:
        try_arm(arm_from("digits", rewards=Reward(count_digits, 1.0)))
    message = str(error.value)
    assert message.startswith("Reward count_digits raised AttributeError(")
    assert "make it return a number for every completion" in message and "\n" not in message


def test_the_prompt_arm_trains_and_scores_on_the_question_alone(tmp_path):
    """`prompt=question`: the course's training problems in the same order, each prompt without
    the system message; scoring builds its prompts the same way."""
    from transformers import AutoTokenizer

    from helpers.data import SYSTEM_PROMPT, grpo_train_dataset
    from helpers.evaluation import Generation, decoding_settings, evaluate
    from helpers.lab import ARMS, question_alone
    from helpers.lab.engine import _curve_callback, train_dataset
    from helpers.profiles import PROFILES
    from helpers.smoke_model import MODEL_DIR

    smoke, chosen = PROFILES["smoke"], ARMS["prompt=question"]
    assert chosen.messages is question_alone and not chosen.overrides and chosen.rewards is None
    tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR)
    course, alone = grpo_train_dataset(smoke, tokenizer), train_dataset(smoke, tokenizer,
                                                                        question_alone)
    assert alone["answer"] == course["answer"]
    assert [p[-1] for p in alone["prompt"]] == [p[-1] for p in course["prompt"]]
    assert all(p == [{"role": "user", "content": q[-1]["content"]}]
               for p, q in zip(alone["prompt"], course["prompt"], strict=True))

    rows = [{"question": "What is 2 + 3?", "answer": "2 + 3 = 5\n#### 5"}]
    seen = []

    def stand_in(model, tokenizer, prompts, settings, side, adapter_dir):
        seen.extend(prompts)
        return [[Generation("<answer>5</answer>", 4, False)]]

    found = evaluate(None, tokenizer, rows, decoding_settings(smoke), MODEL_DIR, stand_in,
                     messages=question_alone)
    assert seen == [found["example_prompt"]] * 2  # base and trained
    assert SYSTEM_PROMPT not in seen[0]
    assert seen[0] == "<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n"
    # the held-out curve during training scores the same prompts
    curve = _curve_callback(tokenizer, rows, smoke, tmp_path, question_alone)
    assert curve.prompts == seen[:1]


@pytest.mark.parametrize("messages, said", [
    (lambda q: q, "not a list of role/content messages ending in the question"),
    (lambda q: [{"role": "user", "content": "hi"}], "not a list of role/content messages"),
    (lambda q: 1 / 0, "raised ZeroDivisionError: division by zero"),
])
def test_a_prompt_function_that_trl_cannot_take_stops_in_one_sentence(messages, said):
    from helpers.lab import ArmError, arm_from

    with pytest.raises(ArmError) as error:
        arm_from("mine", messages=messages)
    assert said in str(error.value) and "def mine(question)" in str(error.value)
    assert "\n" not in str(error.value)


def test_a_learners_arms_in_one_runtime_are_judged_together(monkeypatch, capsys):
    """Three ideas tried in one runtime are three tests: a "hurts" at p = 0.02 alone is not one
    after Holm over the three, and the learner is told so."""
    from helpers.lab import arm_from, reference

    monkeypatch.setattr(reference, "TRIED", {})
    course = [{"seed": 3407 + i, "gain": g, "run_seconds": 1.0}
              for i, g in enumerate([0.15, 0.12, 0.17, 0.14, 0.16, 0.13])]
    monkeypatch.setattr(reference, "local_reference", lambda *a, **k: (course, None, "here"))
    gains = {"low": [0.10, 0.12, 0.11, 0.13], "same": [0.15, 0.13, 0.16, 0.14],
             "wide": [0.30, 0.00, 0.25, 0.05]}

    def runs(chosen, seeds, *args):
        return [{"seed": s, "gain": g, "run_seconds": 1.0}
                for s, g in zip(seeds, gains[chosen.name], strict=False)]

    monkeypatch.setattr(reference, "run_seeds", runs)
    first = reference.try_arm(arm_from("low"), grid={"rows": []})
    assert first["verdict"]["verdict"] == "hurts" and first["together"] == {"low": "hurts"}
    assert "judged together" not in capsys.readouterr().out  # one arm: nothing to adjust
    reference.try_arm(arm_from("same"), grid={"rows": []})
    last = reference.try_arm(arm_from("wide"), grid={"rows": []})
    assert 0.05 / 3 < first["verdict"]["p"] < 0.05  # hurts alone; not once Holm triples p
    assert last["together"] == {"low": "inconclusive", "same": "equivalent", "wide": "inconclusive"}
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        "Your 3 arms in this runtime, judged together (Holm, as the grid's are): low: "
        "inconclusive; same: equivalent; wide: inconclusive.")
