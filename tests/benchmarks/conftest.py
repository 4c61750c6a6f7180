import pytest


def pytest_itemcollected(item):
    """The benchmark scripts' smoke tests launch real processes, as the multi-process tier's do: marked so (`make
    test-fast` leaves them out). They assert what the scripts write, never a speed, so `make test` runs them beside
    the unit, CLI and Slurm tests (the Makefile says why)."""
    item.add_marker(pytest.mark.multiproc)
