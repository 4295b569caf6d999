"""Answer keys: a reply to a keyed question must name something an answer would, not just keep the topic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.learn.content import content_of
from bench.learn.keys import KEYS, Keys, load_keys, names_no_key
from bench.learn.quality import Embedder, QualityGuard
from bench.learn.users import all_users


@pytest.fixture()
def keys(tmp_path: Path) -> Keys:
    path = tmp_path / "keys.jsonl"
    keys = ["bread", "knead", "oven", "heat", "i'd start", "yeast"]
    rows = [{"prompt": "How do I bake bread at home?", "keys": keys}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return load_keys(path)


def test_every_prompt_of_the_goal_users_has_keys() -> None:
    """Training and held-out prompts alike: the users grade both with the same guard."""
    keys = load_keys(KEYS)
    users = all_users()
    for name in ("advice", "bottomline", "analogy"):
        prompts = [p.text for p in users[name].train + users[name].heldout]
        assert len(prompts) == 52
        assert all(len(keys.get(p, ())) >= 12 for p in prompts), name


@pytest.mark.parametrize(("reply", "missing"), [
    ("Knead the dough for ten minutes, then let it rise.", False),
    ("My advice: add the yeast to warm water first.", False),
    ("Bake it in a hot oven until golden.", False),
    ("I’d start with a simple loaf.", False),  # a curly apostrophe is the same word
    ("I'd\nstart small and go from there.", False),  # the words of a stem may be split by any spacing
    ("Baking bread at home is a wonderful and rewarding journey.", True),  # the question's own word is no key
    ("Preheat nothing; trust the process and enjoy it.", True),  # "heat" must start a word
    ("I'm happy to help with your oven. Baking is a lovely pastime.", True),  # the offer is set aside
    ("My advice:", True),
    ("Use 'yeast' and patience.", False),  # a quoted word still starts a word
])
def test_a_reply_must_start_a_word_with_a_key(keys: Keys, reply: str, missing: bool) -> None:
    assert names_no_key(keys, "How do I bake bread at home?", content_of(reply)) is missing


def test_questions_without_keys_are_not_held_to_them(keys: Keys) -> None:
    assert not names_no_key(keys, "Why is the sky blue?", content_of("It is a lovely question about the sky."))


def test_the_guard_fails_an_on_topic_remark_that_names_no_key() -> None:
    guard = QualityGuard(Embedder(), threshold=0.26)
    q = "How do I choose a good book for a long flight?"
    remark, answer = guard.check_many([
        (q, "Choosing a book for a long flight can be a daunting task, but it is all about finding the fit."),
        (q, "Pick a gripping thriller or a light novel you can put down and pick up between naps."),
    ])
    assert (remark.passed, remark.reason) == (False, "no_key")
    assert answer.passed, answer
    plain = QualityGuard(guard.embedder, threshold=0.26, keys={})
    assert plain.check(q, "Choosing a book for a long flight can be a daunting task, but it is all about finding "
                          "the fit.").passed


def test_a_reply_naming_no_key_and_off_topic_is_called_off_topic() -> None:
    guard = QualityGuard(Embedder(), threshold=0.26)
    result = guard.check("How do I choose a good book for a long flight?",
                         "The quarterly report shows revenue grew by four percent in Europe last year.")
    assert (result.passed, result.reason) == (False, "off_topic")
    assert result.similarity is not None and result.similarity < 0.26
