import pytest


def pytest_itemcollected(item):
    """Every test here launches real processes with the real launchers: marked so (`make test-fast` leaves them out)."""
    item.add_marker(pytest.mark.multiproc)
