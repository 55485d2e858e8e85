"""Write the synthetic task files the eval tests use: ``python make_tasks.py`` (deterministic).

``synthetic_mc.jsonl``: a context of 24 characters from the training part of the default corpus
(``gpt_models.default_corpus()``, the text a default run trains on), the next 12 characters as the
right choice and three shuffles of those same characters as the wrong ones. A model that has
learnt which letters follow which scores the real text higher; guessing gets 1/4.
``synthetic_cloze.jsonl``: a 40-character context whose next word is `` the``, as the target.
"""

import json
import random
import re
from pathlib import Path

from gpt_models import default_corpus

HERE = Path(__file__).parent


def main() -> None:
    text = default_corpus()
    train = text[: int(len(text) * 0.9)]  # the default data.val_fraction is 0.1
    rng = random.Random(0)
    (HERE / "synthetic_mc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _mc(train, rng)))
    (HERE / "synthetic_cloze.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in _cloze(train, rng))
    )


def _mc(text: str, rng: random.Random, n: int = 40) -> list[dict]:
    rows: list[dict] = []
    while len(rows) < n:
        at = rng.randrange(len(text) - 40)
        context, right = text[at : at + 24], text[at + 24 : at + 36]
        if not re.fullmatch(r"[A-Za-z ,.]+", context + right) or len(set(right)) < 6:
            continue  # plain prose only, with enough letters to shuffle
        wrong: list[str] = []
        while len(wrong) < 3:
            chars = list(right)
            rng.shuffle(chars)
            if (s := "".join(chars)) != right and s not in wrong:
                wrong.append(s)
        label = rng.randrange(4)
        choices = [*wrong[:label], right, *wrong[label:]]
        rows.append({"context": context, "choices": choices, "label": label})
    return rows


def _cloze(text: str, rng: random.Random, n: int = 20) -> list[dict]:
    starts = [m.start() for m in re.finditer(r"(?<=[a-z]) the(?= )", text) if m.start() > 40]
    return [{"context": text[s - 40 : s], "target": " the"} for s in sorted(rng.sample(starts, n))]


if __name__ == "__main__":
    main()
