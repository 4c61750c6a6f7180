import os

import pytest

# The in-process tests run offline and single-threaded, like the launched ones.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DISTBENCH_NO_DOWNLOAD", "1")

_MR: dict = {}  # where the real MR data was found (tests/mr_data.py), once per session


class MissingMRData(pytest.Item):
    """Stands for every test that needs the real MR data when none can be had: one failure, one line."""

    def __init__(self, *, message: str, **kwargs):
        super().__init__(**kwargs)
        self.message = message

    def runtest(self):
        raise RuntimeError(self.message)

    def repr_failure(self, excinfo, style=None):
        return self.message

    def reportinfo(self):
        return self.path, None, self.name


@pytest.hookimpl(trylast=True)  # after -k/-m have deselected what they deselect
def pytest_collection_modifyitems(session, config, items):
    needing = [item for item in items if "mr_dir" in getattr(item, "fixturenames", ())]
    if not needing:
        return
    from tests.mr_data import how_to_provide, locate

    folder, where = locate()
    if folder is not None:
        _MR.update(folder=folder, where=where)
        return
    config.hook.pytest_deselected(items=needing)
    keep = [item for item in items if item not in needing]
    failure = MissingMRData.from_parent(needing[0].parent, name="needs-the-MR-polarity-data",
                                        message="error: " + how_to_provide(where))  # fmt: skip
    items[:] = [failure, *keep]


def pytest_terminal_summary(terminalreporter):
    if _MR:
        terminalreporter.write_line(f"MR polarity data: {_MR['where']}")


@pytest.fixture(scope="session")
def mr_dir():
    """The real MR polarity data (10,662 sentences), found as tests/mr_data.py says."""
    return _MR["folder"]


@pytest.fixture(scope="session")
def mini_mr(tmp_path_factory):
    """A small MR-format corpus written by the tests themselves: for tests of mechanics only."""
    from tests.mr_data import write_mini_corpus

    return write_mini_corpus(tmp_path_factory.mktemp("mini-mr"))


MNIST_STEPS = 50
# Runs at different world sizes sum the same gradients in another order; the float rounding that differs (1e-7)
# grows step by step as training amplifies it. Measured on this workplace's AMD EPYC host, single x1 against ddp x2
# (50 steps, Adadelta lr 0.5): 1.2e-06 at step 10, 3e-04 at step 20, 7e-03 at step 44; a sharding or averaging
# bug shows at the first step by 1e-2 or more. Per-step losses are compared over the first EQUIVALENCE_STEPS.
EQUIVALENCE_STEPS = 10
MNIST_ARGS = ["--task", "mnist", "--no-progress", "--threads", "1", "--dropout", "0", "--batch-size", "64",
              "--max-steps", str(MNIST_STEPS)]  # fmt: skip


@pytest.fixture(scope="session")
def mnist_run(tmp_path_factory):
    """`mnist_run(backend, world_size, *options)`: the record of a real launched MNIST run (dropout off, global
    batch 64, 1 thread per process, MNIST_STEPS steps), run once per session and shared by the test modules
    that check it (equivalence in test_multiprocess.py, accumulation and compression in test_knobs.py)."""
    from tests.helpers import child_env, launch, read_record, run_cmd

    cache: dict = {}

    def get(backend: str, n: int, *options: str) -> dict:
        key = (backend, n, options)
        if key not in cache:
            tmp = tmp_path_factory.mktemp(f"{backend}-x{n}")
            out = tmp / "r.json"
            run_cmd(launch(backend, n, [*MNIST_ARGS, *options, "--output", str(out)]), timeout=240,
                    env=child_env(tmp))  # fmt: skip
            cache[key] = read_record(out)
        return cache[key]

    return get
