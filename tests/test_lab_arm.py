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


def test_the_prompt_arm_trains_and_scores_on_the_question_alone():
    """`prompt=question`: the course's training problems in the same order, each prompt without
    the system message; scoring builds its prompts the same way."""
    from transformers import AutoTokenizer

    from helpers.data import SYSTEM_PROMPT, grpo_train_dataset
    from helpers.evaluation import Generation, decoding_settings, evaluate
    from helpers.lab import ARMS, question_alone
    from helpers.lab.engine import train_dataset
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
