"""The Slurm test cluster (scripts/slurm_test_cluster.sh): the one CI started (DISTBENCH_TEST_SLURM_CONF), else one
started for this session and stopped after it. A cluster that cannot be started fails the tests that need it, with
the script's own line: they are never skipped."""

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import ROOT

SCRIPT = ROOT / "scripts" / "slurm_test_cluster.sh"


def pytest_itemcollected(item):
    item.add_marker(pytest.mark.multiproc)  # every test here starts job steps of real processes


@pytest.fixture(scope="session")
def slurm_conf(tmp_path_factory):
    given = os.environ.get("DISTBENCH_TEST_SLURM_CONF")
    if given:
        yield Path(given)
        return
    folder = tmp_path_factory.mktemp("slurm-cluster")
    proc = subprocess.run(["bash", str(SCRIPT), "start", str(folder)], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        said = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        pytest.fail(f"the Slurm test cluster could not be started: {said}", pytrace=False)
    yield Path(proc.stdout.strip())
    subprocess.run(["bash", str(SCRIPT), "stop", str(folder)], capture_output=True, timeout=120)


@pytest.fixture
def slurm_env(slurm_conf, tmp_path):
    from tests.helpers import child_env

    return child_env(tmp_path, SLURM_CONF=str(slurm_conf))
