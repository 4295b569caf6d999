"""Answer keys: what a reply that answers a question would mention, known to the simulated users alone.

Each training and held-out question of the advice, bottom-line and analogy users has a list of word
stems (`data/answer_keys.jsonl`): the substance of an answer (actions, things, mechanisms, a verdict),
written by reviewers who saw the question alone, never a reply (`data/answer_keys.md`). A reply
answers only if what it says, once its labels and its talk about the assistant are set aside
(`content_of`), starts a word with one of its question's stems. A remark that stays on topic
("Choosing a book for a flight can be a daunting task.") names none.

A key is a sign, not proof: a remark can name one ("no" also starts "not"), and an answer in words
the list lacks is missed. Against the first 1339 replies read one by one (`data/answer_labels.jsonl`),
the guard with the keys agrees 0.74 (0.47 without): it passes 0.27 of the non-answers (0.75) and
fails 0.22 of the answers (0.04). Those are the labels whose misses prompted the keys' broader second
pass, so they are no held-out figure. The 539 held-out replies of the first runs held to the keys,
labelled after them, are: there the guard agrees 0.80 (0.56 without), passing 66 of 356 non-answers
and failing 44 of 183 answers, many of them an odd pick (snowboarding as a game for a snowy day) or
a hedge that only leans one way ("a daily stand-up meeting is a crucial aspect of any team"). Every
run reports the guard's agreement with all the labels.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

KEYS = Path(__file__).resolve().parent / "data" / "answer_keys.jsonl"
Keys = Mapping[str, tuple[re.Pattern[str], ...]]


def _normal(text: str) -> str:
    return text.lower().replace("’", "'")


def _stem(key: str) -> re.Pattern[str]:
    """A stem that must start a word (not the rest of one after an apostrophe, as in "don't"); the words of
    a multi-word stem may be split by any spacing. A short stem matches longer words too: "no" also
    matches "not" and "now", as the reviewers who wrote the keys were told."""
    words = _normal(key).split()
    return re.compile(r"(?<!\w)(?<!\w')" + r"\s+".join(re.escape(w) for w in words))


def load_keys(path: Path = KEYS) -> dict[str, tuple[re.Pattern[str], ...]]:
    """Question → its stems, less any stem the question itself says (naming it is no answer)."""
    out: dict[str, tuple[re.Pattern[str], ...]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            asked = _normal(row["prompt"])
            out[row["prompt"]] = tuple(p for p in map(_stem, row["keys"]) if not p.search(asked))
    return out


def names_no_key(keys: Keys, question: str, content: str) -> bool:
    """True when the question has keys and a reply's content (`content_of`, which the guard has already
    read for its length) starts a word with none of them."""
    stems = keys.get(question)
    if not stems:
        return False
    said = _normal(content)
    return not any(p.search(said) for p in stems)
