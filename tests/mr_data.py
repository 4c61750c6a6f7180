"""Where the tests find the MR polarity data: the way the product does, so that a fresh clone anywhere works.

Sources, in order: the folder named by DISTBENCH_MR_DATA; `../shared/data/rt-polarity` beside the repository
where present (CI here); the product's own cache (`~/.cache/distbench/rt-polarity`, DISTBENCH_CACHE moves
it); the product's own download into that cache (`data.mr.download`, which checks the content digests;
DISTBENCH_MR_URL names a mirror). Tests that only check mechanics (a tiny random BERT, bad inputs,
checkpoints of another task) need none of this: they use `write_mini_corpus`.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from distbench.data import mr
from distbench.errors import UserError

ENV = "DISTBENCH_MR_DATA"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "rt-polarity"


def how_to_provide(reason: str) -> str:
    return (
        f"the MR polarity data that the tests using the `mr_dir` fixture need was not found ({reason}): set "
        f"{ENV}=DIR (a folder with rt-polarity.pos and rt-polarity.neg), put the files in "
        f"{mr.cache_dir() / 'rt-polarity'}, or let the tests download them (network, or "
        "DISTBENCH_MR_URL)"
    )


def locate() -> tuple[Path | None, str]:
    """(the folder, where it came from), or (None, why not)."""
    explicit = os.environ.get(ENV)
    if explicit:
        folder = mr.find_files(Path(explicit))
        return (folder, f"{ENV}={explicit}") if folder else (None, f"{ENV}={explicit} has no rt-polarity.pos/.neg")
    if shared := mr.find_files(SHARED):
        return shared, str(SHARED)
    cached = mr.cache_dir() / "rt-polarity"
    if in_cache := mr.find_files(cached):
        return in_cache, f"cache {cached}"
    try:
        folder = mr.download(cached, mr.download_url())
    except UserError as e:
        return None, f"the download failed: {e}"
    if folder is None:
        return None, f"not in the cache, and {mr.download_url()} cannot be reached"
    return folder, f"downloaded from {mr.download_url()}"


_POSITIVE = ["moving", "funny", "sharp", "warm", "gripping", "tender", "clever", "beautiful", "honest", "lively"]
_NEGATIVE = ["dull", "tedious", "flat", "clumsy", "bland", "muddled", "shallow", "lifeless", "tiresome", "hollow"]
_NOUNS = ["film", "script", "cast", "story", "ending", "director", "score", "plot", "camera work", "dialogue"]


def write_mini_corpus(folder: Path, per_class: int = 200, seed: int = 0) -> Path:
    """A small corpus in MR's format (rt-polarity.pos/.neg, one sentence per line), written by the test itself:
    enough for mechanics (400 sentences: 360 train, 40 test), nothing to learn from."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for name, words in (("rt-polarity.pos", _POSITIVE), ("rt-polarity.neg", _NEGATIVE)):
        lines = [
            f"the {rng.choice(_NOUNS)} is {rng.choice(words)} and the {rng.choice(_NOUNS)} {rng.choice(words)}"
            for _ in range(per_class)
        ]
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


MINI_TEST_COUNT = 40  # mr.split's 10 % of the mini corpus's 400 sentences
