"""How the judge's reaction classifier reads the learning benchmark's simulated replies: for each
group of corrections (alone and with each retry request) and the thanks (alone and with a next
question), how many it decides, and how many it decides the wrong way.

    python scripts/reaction_coverage.py          (a few seconds on 2 cores)

The simulator's phrasings are never training data for the classifier (tests/bench check that no
5-word run is shared); this reads them as a test set, to see where the judge leaves turns to the
LLM votes.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.learn import users  # noqa: E402
from judges.reaction import load_reaction_classifier  # noqa: E402


def groups() -> dict[str, tuple[list[str], int]]:
    """Name -> (replies, the right sign)."""
    out = {name: ([t for c in phrasings for t in (c, *(f"{c} {r}" for r in users.REDO))], -1)
           for name, phrasings in users.correction_groups().items()}
    out["thanks"] = ([t for c in users.THANKS
                      for t in (c, *(f"{c} {q}How does a lock work?" for q in users.NEXT_QUESTION))], 1)
    return out


def main() -> None:
    classifier = load_reaction_classifier(Path(tempfile.mkdtemp()))
    print("| replies | n | decided right | undecided | decided wrong |")
    print("|---|---|---|---|---|")
    totals = [0, 0, 0, 0]
    for name, (texts, sign) in groups().items():
        scores = [classifier.classify(t).score for t in texts]
        row = [len(texts), sum(s == sign for s in scores), sum(s is None for s in scores),
               sum(s is not None and s != sign for s in scores)]
        totals = [a + b for a, b in zip(totals, row, strict=True)]
        print(f"| {name} | " + " | ".join(map(str, row)) + " |")
    print("| all | " + " | ".join(map(str, totals)) + " |")


if __name__ == "__main__":
    main()
