"""MR sentence polarity data (Pang & Lee, "sentence polarity dataset v1.0": 5,331 positive and 5,331
negative movie-review sentences) with a fixed 90/10 train/test split, tokenised once at load time.

Sources, in order: --data-dir; the user cache; a download of the public Cornell release into the
cache (its content checked against the reference digest below). Offline with nothing cached, one line
says how to provide the files.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from distbench.data.download import cache_dir, downloads_allowed, fetch
from distbench.errors import UserError

URL = "https://www.cs.cornell.edu/people/pabo/movie-review-data/rt-polaritydata.tar.gz"


def download_url() -> str:
    """The release archive's address; DISTBENCH_MR_URL points at a mirror (its content is checked all the same)."""
    return os.environ.get("DISTBENCH_MR_URL", URL)


FILES = {"pos": "rt-polarity.pos", "neg": "rt-polarity.neg"}
# sha256 of the decoded sentences (stripped, joined by "\n"): the same for the original latin-1 release
# and for UTF-8 re-encodings of it, so it checks content rather than one byte encoding.
CONTENT_SHA256 = {
    "pos": "38ef5f688f1c34b3c9e5820b5edabc3272ecb721bff86c56fdfd9119540d7bd0",
    "neg": "a35e6bf99f4da4bd5780ca60b061e80d9c1d2076395d4cec79e85f25d62b3f83",
}
SPLIT_SEED = 1234  # the train/test split is fixed: the same test sentences for every run and backend
TEST_FRACTION = 0.1


@dataclass(frozen=True)
class Sentences:
    texts: list[str]
    labels: list[int]  # 1 positive, 0 negative
    source: str


def parse_lines(raw: bytes, where: str) -> list[str]:
    """Sentences of one file: UTF-8, or latin-1 as in the original release; refuses empty or binary files."""
    if b"\x00" in raw:
        raise UserError(f"{where}: not a text file (contains NUL bytes)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        raise UserError(f"{where}: no sentences (the file is empty)")
    return lines


def read_lines(path: Path) -> list[str]:
    return parse_lines(path.read_bytes(), str(path))


def content_digest(lines: list[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


def find_files(root: Path) -> Path | None:
    for cand in (root, root / "rt-polaritydata"):
        if all((cand / f).is_file() for f in FILES.values()):
            return cand
    return None


def _sentence_files(blob: bytes, url: str) -> dict[str, list[str]]:
    """{file name: sentences} from the release archive, each file checked against its reference digest."""
    try:
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
            members = tar.getmembers()
            found = {}
            for key, name in FILES.items():
                member = next((m for m in members if m.name.endswith("/" + name) or m.name == name), None)
                if member is None:
                    raise UserError(f"the archive downloaded from {url} has no {name}; pass --data-dir")
                found[key] = parse_lines(tar.extractfile(member).read(), f"{url}:{name}")
    except (tarfile.TarError, EOFError, OSError, zlib.error) as e:
        raise UserError(f"the download of {url} is not the expected .tar.gz archive ({e}); pass --data-dir") from e
    for key, lines in found.items():
        if content_digest(lines) != CONTENT_SHA256[key]:
            raise UserError(f"the downloaded {FILES[key]} does not match the reference checksum; pass --data-dir")
    return {FILES[key]: lines for key, lines in found.items()}


def download(target: Path, url: str) -> Path | None:
    """Download and check both files, then write them into `target`; nothing is written unless both are
    good, and a failed write leaves no partial file. None when there is no network."""
    blob = fetch(url)
    if blob is None:
        return None
    files = _sentence_files(blob, url)
    target.mkdir(parents=True, exist_ok=True)
    for name, lines in files.items():
        tmp = target / (name + ".tmp")
        try:
            tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
            tmp.replace(target / name)
        finally:
            tmp.unlink(missing_ok=True)
    return target


def load_sentences(data_dir: Path | None) -> Sentences:
    if data_dir is not None:
        folder = find_files(data_dir)
        if folder is None:
            missing = [f for f in FILES.values() if not (data_dir / f).is_file()]
            raise UserError(f"--data-dir {data_dir} is missing {' and '.join(missing)} (the MR polarity files)")
        source = f"files:{folder}"
    else:
        cached = cache_dir() / "rt-polarity"
        folder = find_files(cached)
        source = f"cache:{cached}"
        if folder is None and downloads_allowed():
            folder = download(cached, download_url())
            source = f"download:{download_url()}"
        if folder is None:
            raise UserError(
                "the MR polarity data is not cached and cannot be downloaded (offline?): pass --data-dir DIR with "
                f"rt-polarity.pos and rt-polarity.neg, or put them in {cached}"
            )
    pos, neg = read_lines(folder / FILES["pos"]), read_lines(folder / FILES["neg"])
    return Sentences(pos + neg, [1] * len(pos) + [0] * len(neg), source)


def split(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Fixed 90/10 split: (train indices, test indices); 1,066 test sentences for the full data."""
    order = np.random.RandomState(SPLIT_SEED).permutation(n)
    n_test = int(n * TEST_FRACTION)
    return order[n_test:], order[:n_test]


class TokenizedSentences(Dataset):
    """Token ids per sentence (unpadded); padding is per batch, in `pad_collate`."""

    def __init__(self, input_ids: list[list[int]], labels: list[int]):
        self.input_ids, self.labels = input_ids, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[list[int], int]:
        return self.input_ids[i], self.labels[i]


def tokenize(sentences: Sentences, tokenizer, max_length: int) -> tuple[TokenizedSentences, TokenizedSentences]:
    ids = tokenizer(sentences.texts, truncation=True, max_length=max_length)["input_ids"]
    train_idx, test_idx = split(len(ids))
    make = lambda idx: TokenizedSentences([ids[i] for i in idx], [sentences.labels[i] for i in idx])  # noqa: E731
    return make(train_idx), make(test_idx)


def pad_collate(samples: list[tuple[list[int], int]], pad_id: int = 0) -> dict[str, torch.Tensor]:
    """Dynamic padding: to the longest sentence of this batch, with the attention mask to match."""
    longest = max(len(ids) for ids, _ in samples)
    input_ids = torch.full((len(samples), longest), pad_id, dtype=torch.long)
    mask = torch.zeros((len(samples), longest), dtype=torch.long)
    for row, (ids, _) in enumerate(samples):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        mask[row, : len(ids)] = 1
    labels = torch.tensor([label for _, label in samples], dtype=torch.long)
    return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}
