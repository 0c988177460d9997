"""The offline generator: GSM8K's exact schema, seeded and deterministic."""

import re

import pytest

from helpers.data import extract_gold_answer
from helpers.synthetic import (
    FIRST,
    SECOND,
    TEMPLATES,
    TEST_POOL,
    TRAIN_POOL,
    generate_problems,
    synthetic_split,
)

GSM8K_REAL_ROW = {  # the first row of GSM8K's train split, for schema comparison
    "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many "
    "clips in May. How many clips did Natalia sell altogether in April and May?",
    "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72",
}


def test_rows_have_exactly_gsm8ks_columns_and_types():
    for row in generate_problems(200, seed=1):
        assert set(row) == set(GSM8K_REAL_ROW)
        assert all(isinstance(value, str) and value for value in row.values())


def test_answers_end_like_gsm8k():
    pattern = re.compile(r"\n#### -?\d+$")
    assert pattern.search(GSM8K_REAL_ROW["answer"])
    for row in generate_problems(200, seed=2):
        assert pattern.search(row["answer"]), row["answer"]


def test_calculator_annotations_are_correct_arithmetic():
    for row in generate_problems(300, seed=3):
        for expr, result in re.findall(r"<<([^=]+)=([^>]+)>>", row["answer"]):
            assert eval(expr) == pytest.approx(float(result)), row  # noqa: S307 - digits only


def test_gold_answer_is_the_last_computed_value():
    for row in generate_problems(100, seed=4):
        gold = extract_gold_answer(row["answer"])
        assert gold.lstrip("-").isdigit()


def test_same_seed_same_rows_other_seed_other_rows():
    assert generate_problems(50, seed=7) == generate_problems(50, seed=7)
    assert generate_problems(50, seed=7) != generate_problems(50, seed=8)


def test_every_template_is_used():
    questions = " ".join(row["question"] for row in generate_problems(200, seed=5))
    assert len(TEMPLATES) == 4
    for phrase in ["buys", "gives", "puts", "loses"]:
        assert phrase in questions


def test_problems_are_one_step_two_digit_plus_or_minus_one_digit():
    for row in generate_problems(300, seed=6):
        (expr,) = re.findall(r"<<([^=]+)=", row["answer"])
        a, op, b = re.fullmatch(r"(\d+)([+-])(\d+)", expr).groups()
        assert FIRST[0] <= int(a) <= FIRST[1] and SECOND[0] <= int(b) <= SECOND[1]
        assert 10 <= int(a) <= 99 and 1 <= int(b) <= 9  # two-digit plus or minus one-digit
        assert f" {a} " in row["question"] and f" {b} " in row["question"]
        assert ("gives" in row["question"] or "loses" in row["question"]) == (op == "-")


def test_test_split_is_held_out_from_train():
    train = {row["question"] for row in synthetic_split("train", TRAIN_POOL)}
    test = [row["question"] for row in synthetic_split("test", 300)]
    assert len(test) == 300 and not any(q in train for q in test)


def test_validation_split_is_held_out_from_train_and_test():
    """The smoke model's warm start stops on validation accuracy: it must never see test rows."""
    train = {row["question"] for row in synthetic_split("train", TRAIN_POOL)}
    test = {row["question"] for row in synthetic_split("test", TEST_POOL)}
    validation = [row["question"] for row in synthetic_split("validation", 200)]
    assert len(validation) == 200 and not (set(validation) & (train | test))


def test_bad_arguments_fail_clearly():
    with pytest.raises(ValueError, match="'validation'.*use one of train, test, validation"):
        synthetic_split("'validation'", 3)
    with pytest.raises(ValueError, match="n must be"):
        generate_problems(-1)
