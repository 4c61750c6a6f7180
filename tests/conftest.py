import os
import textwrap
from pathlib import Path

import pytest

from distbench.training import fairness

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


DURATIONS = Path(__file__).with_name("durations.txt")


def longest_first(items: list) -> None:
    """The modules in the order of their last duration (tests/durations.txt), the longest first, each module's tests in
    their own order: xdist's loadfile hands modules to its workers in this order (make test turns off its reordering
    by test count, which started the slowest modules last and left one worker running 2 minutes alone)."""
    seconds = {}
    for line in DURATIONS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            took, module = line.split()
            seconds[module] = float(took)
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::")[0], 0.0))  # stable: a module's order kept


@pytest.hookimpl(trylast=True)  # after -k/-m have deselected what they deselect
def pytest_collection_modifyitems(session, config, items):
    longest_first(items)
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
    failure = MissingMRData.from_parent(
        needing[0].parent, name="needs-the-MR-polarity-data", message="error: " + how_to_provide(where)
    )
    items[:] = [failure, *keep]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """DISTBENCH_TEST_CPU=FILE: each test's CPU seconds (its worker's and every process it started and waited for,
    launched ranks included) and wall seconds, set-up to teardown, one JSON line each: what the suite's 2 cores spend
    where (`--durations` gives wall time only, which a test's neighbours lengthen)."""
    path = os.environ.get("DISTBENCH_TEST_CPU")
    if not path:
        yield
        return
    import json
    import resource
    import time

    def cpu() -> float:
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    c0, w0 = cpu(), time.monotonic()
    yield
    line = {"test": item.nodeid, "cpu_s": round(cpu() - c0, 2), "wall_s": round(time.monotonic() - w0, 2)}
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")


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
# Per-step losses are compared over the first fairness.EARLY_STEPS: later, training amplifies the float rounding that
# differs between world sizes (the measurements are beside the tolerances, distbench/training/fairness.py).
EQUIVALENCE_STEPS = fairness.EARLY_STEPS
MNIST_ARGS = [
    *"--task mnist --no-progress --threads 1 --dropout 0 --batch-size 64 --max-steps".split(),
    str(MNIST_STEPS),
]


def shared_folder(tmp_path_factory) -> Path:
    """Where launched runs are kept for every test that checks them: DISTBENCH_TEST_SHARED where `make test` sets it
    (one folder for all its passes, removed at its end), else this pytest session's own (shared by its xdist workers,
    which each have a session of their own)."""
    if os.environ.get("DISTBENCH_TEST_SHARED"):
        return Path(os.environ["DISTBENCH_TEST_SHARED"])
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def mnist_run(tmp_path_factory):
    """`mnist_run(backend, world_size, *options)`: the record of a real launched MNIST run (dropout off, global
    batch 64, 1 thread per process, MNIST_STEPS steps), run once and shared by the test modules that check it
    (equivalence in multiproc/test_equivalence.py, accumulation and compression in test_knobs.py, ...): the first
    process that asks for it runs it, under a lock, and the others read its record (shared_folder)."""
    from filelock import FileLock

    from tests.helpers import child_env, launch, read_record, run_cmd

    runs = shared_folder(tmp_path_factory) / "mnist-runs"
    runs.mkdir(parents=True, exist_ok=True)
    cache: dict = {}

    def get(backend: str, n: int, *options: str) -> dict:
        key = (backend, n, options)
        if key not in cache:
            folder = runs / "-".join([backend, f"x{n}", *(o.lstrip("-") for o in options)])
            out = folder / "r.json"
            with FileLock(f"{folder}.lock"):
                if not out.is_file():  # a record is written whole (atomically) or not at all
                    folder.mkdir(exist_ok=True)
                    cmd = launch(backend, n, [*MNIST_ARGS, *options, "--output", str(out)])
                    run_cmd(cmd, timeout=240, env=child_env(folder))
            cache[key] = read_record(out)
        return cache[key]

    return get


# A user's task, written outside the package: the example's shape, with a hook per way of breaking the contract.
USER_TASK = textwrap.dedent("""
    import os
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.utils.data import TensorDataset

    class Good:
        name = "user-good"
        defaults = {"epochs": 1, "batch_size": 32, "lr": 1e-2}

        def __init__(self, cfg):
            self.cfg = cfg

        def build_model(self):
            p = 0.1 if self.cfg.dropout is None else self.cfg.dropout
            return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(p), nn.Linear(32, 2))

        def build_optimizer(self, model):
            return torch.optim.Adam(model.parameters(), lr=self.cfg.lr)

        def data_seed(self):
            return self.cfg.seed

        def datasets(self):
            g = torch.Generator().manual_seed(self.data_seed())
            x = torch.randn(1200, 8, generator=g)
            y = (x.sum(1) > 0).long()
            return TensorDataset(x[:1000], y[:1000]), TensorDataset(x[1000:], y[1000:])

        def collate(self, samples):
            xs, ys = zip(*samples)
            return torch.stack(xs), torch.stack(ys)

        def step(self, model, batch):
            return F.cross_entropy(model(batch[0]), batch[1])

        def evaluate(self, model, batch):
            x, y = batch
            out = model(x)
            return {"loss_sum": F.cross_entropy(out, y, reduction="sum"), "correct": (out.argmax(1) == y).sum(),
                    "count": torch.tensor(len(y))}

    class UnseededWeights(Good):
        def build_model(self):
            model = super().build_model()
            g = torch.Generator()
            g.seed()  # from the OS, not from the run's seed
            with torch.no_grad():
                for p in model.parameters():
                    p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            return model

    class RankDependentData(Good):
        def data_seed(self):
            return self.cfg.seed + int(os.environ.get("RANK", os.environ.get("HOROVOD_RANK", "0")))

    class EvalSkipsSamples(Good):
        def evaluate(self, model, batch):
            x, y = batch
            return super().evaluate(model, (x[1:], y[1:]))  # drops the first sample of every batch

    class RankDependentAndSkipping(RankDependentData, EvalSkipsSamples):
        pass

    class NoEvaluate:
        def __init__(self, cfg):
            pass

        def build_model(self): ...
        def build_optimizer(self, model): ...
        def datasets(self): ...
        def collate(self, samples): ...
        def step(self, model, batch): ...
""")


@pytest.fixture(scope="module")
def task_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("user-task") / "my_task.py"
    path.write_text(USER_TASK)
    return path
