"""The suite on a fresh clone with no `../shared` beside it and an empty data cache: the tests that need the real
MR data get it the way the product does (here: its download, from a mirror), or fail once with one line."""

import io
import os
import shutil
import subprocess
import sys
import tarfile

import pytest

from distbench.data import mr
from distbench.process import free_port
from tests.helpers import ROOT, child_env, run_cmd

# a test that needs the real data, one that needs none
SELECTION = "full_data_and_fixed_split or latin1"


def _fresh_copy(dst):
    """The repository's files as a clone has them (tracked, and new files not ignored), nothing else."""
    files = (
        subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, files):
        src, target = ROOT / name, dst / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():  # distbench/backends -> ../backends: a link in a clone too
            target.symlink_to(os.readlink(src))
        elif src.is_file():
            shutil.copy2(src, target)
    return dst


def _pytest_in(clone, tmp_path, url, *args):
    env = child_env(tmp_path, DISTBENCH_MR_URL=url)  # DISTBENCH_CACHE: an empty folder in tmp_path
    env.pop("DISTBENCH_MR_DATA", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit/test_data.py", *args]
    return run_cmd(cmd, timeout=280, env=env, cwd=clone, expect_rc=None)


@pytest.mark.timeout(300)
def test_without_any_source_the_tests_that_need_the_data_fail_once_with_one_line(tmp_path):
    clone = _fresh_copy(tmp_path / "clone")
    assert not (tmp_path / "shared").exists()
    blocked = f"http://127.0.0.1:{free_port()}/rt-polaritydata.tar.gz"  # nothing listens there
    proc = _pytest_in(clone, tmp_path, blocked, "-k", SELECTION)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert "1 failed, 1 passed" in out and "deselected" in out  # the data tests: one failure; the rest ran
    line = (
        f"error: the MR polarity data that the tests using the `mr_dir` fixture need was not found (not in the "
        f"cache, and {blocked} cannot be reached): set DISTBENCH_MR_DATA=DIR"
    )
    assert line in out
    assert "Traceback" not in out and out.count("FAILED") == 1


@pytest.mark.timeout(300)
def test_the_tests_download_the_data_into_the_product_cache(tmp_path, mr_dir):
    """A mirror of the release archive (built from the real files) stands for the network: the product's
    download fetches it, checks its digests and caches it, and the test that needs the data passes."""
    archive = tmp_path / "rt-polaritydata.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name in mr.FILES.values():
            data = (mr_dir / name).read_bytes()
            info = tarfile.TarInfo(f"rt-polaritydata/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    clone = _fresh_copy(tmp_path / "clone")
    proc = _pytest_in(clone, tmp_path, archive.as_uri(), "-k", "full_data_and_fixed_split")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"MR polarity data: downloaded from {archive.as_uri()}" in proc.stdout
    assert mr.find_files(tmp_path / "cache" / "rt-polarity")  # in the product's cache now, for the next run
