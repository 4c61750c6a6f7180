"""Bad input is one clear line and exit code 2, before any process group starts, and nothing is written."""

import hashlib
import shutil
import sys

import pytest

from tests.helpers import assert_one_line_error, child_env, run_cmd, run_here, run_in, run_py
from tests.mr_data import write_mini_corpus

# the options of the reliability runs whose checkpoints these tests spoil (tests/multiproc/test_reliability.py)
RELIABLE = ["--no-progress", "--threads", "1", "--timeout-s", "60"]


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--backend", "nope"], "nope"),
        (["--task", "imagenet"], "imagenet"),
        (["--batch-size", "0"], "--batch-size must be positive"),
        (["--batch-size", "-8"], "--batch-size must be positive"),
        (["--lr", "0"], "--lr must be positive"),
        (["--lr", "-1e-3"], "--lr must be positive"),
        (["--epochs", "0"], "--epochs must be positive"),
        (["--max-steps", "0"], "--max-steps must be positive"),
        (["--dropout", "1.5"], "--dropout"),
        (["--data-dir", "/does/not/exist"], "does not exist"),
        (["--output", "results.csv"], "--output must end in .json"),
        (["--threads", "0"], "--threads must be positive"),
        (["--max-length", "4"], "--max-length"),
        (["--epochs", "two"], "--epochs"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, fragment):
    assert_one_line_error(run_here(args, tmp_path), fragment)


def test_batch_not_divisible_by_world_size(tmp_path):
    # the world size announced by the launcher is checked before the process group is joined
    env = dict(RANK="0", WORLD_SIZE="3", LOCAL_RANK="0", LOCAL_WORLD_SIZE="3", MASTER_ADDR="127.0.0.1")
    proc = run_here(["--backend", "ddp", "--batch-size", "64"], tmp_path, **env)
    assert_one_line_error(proc, "divide evenly across 3 processes")


@pytest.mark.parametrize(
    "backend,env,fragment",
    [
        ("horovod", dict(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", TORCHELASTIC_RUN_ID="x"), "torchrun"),
        ("ddp", dict(HOROVOD_RANK="0", HOROVOD_SIZE="2", HOROVOD_LOCAL_RANK="0"), "horovodrun"),
        ("accelerate", dict(HOROVOD_RANK="0", HOROVOD_SIZE="2", HOROVOD_LOCAL_RANK="0"), "horovodrun"),
        (
            "single",
            dict(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", TORCHELASTIC_RUN_ID="x"),
            "started by torchrun with 2",
        ),
    ],
)
def test_wrong_launcher_is_refused(tmp_path, backend, env, fragment):
    assert_one_line_error(run_here(["--backend", backend], tmp_path, **env), fragment)


def test_corrupt_data_dir(tmp_path):
    from tests.helpers import make_mnist_dir

    data = tmp_path / "mnist"
    make_mnist_dir(data)
    (data / "t10k-labels-idx1-ubyte").write_bytes(b"garbage")
    assert_one_line_error(run_here(["--data-dir", str(data)], tmp_path), "t10k-labels-idx1-ubyte")


def test_empty_data_dir(tmp_path):
    assert_one_line_error(run_here(["--data-dir", str(tmp_path)], tmp_path), "holds no MNIST IDX files")


def test_existing_json_output_is_not_overwritten(tmp_path):
    out = tmp_path / "r.json"
    out.write_text('{"keep": true}')
    assert_one_line_error(run_here(["--output", str(out)], tmp_path), "--force")
    assert out.read_text() == '{"keep": true}'


def test_unwritable_output_is_refused_before_training(tmp_path):
    """In a fresh process: nothing a library prints when imported reaches stderr before the one line (the cases run
    in this process, run_here, cannot see that)."""
    proc = run_py(["--output", "/proc/nope/x.json", "--epochs", "50"], tmp_path, timeout=60)
    assert_one_line_error(proc, "--output /proc/nope/x.json cannot be written")
    assert "notice" not in proc.stderr  # refused before any data was loaded


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--accumulate", "0"], "--accumulate must be positive"),
        (["--batch-size", "64", "--accumulate", "3"], "must split into 3 equal micro-batches"),
        (["--grad-compression", "fp16"], "the single backend exchanges no gradients"),
        (["--grad-compression", "int8"], "'int8' is not one of"),
        (["--zero-stage", "4", "--backend", "deepspeed"], "--zero-stage must be between 0 and 3, got 4"),
        (["--zero-stage", "2"], "--zero-stage 2: only deepspeed, accelerate-deepspeed have ZeRO stages; leave it 0"),
    ],
    ids=["zero", "indivisible", "single-compression", "unknown", "stage-range", "stage-elsewhere"],
)
def test_bad_knobs_are_one_line(tmp_path, args, fragment):
    proc = run_here(["--max-steps", "2", "--no-progress", "--output", tmp_path / "r.json", *args], tmp_path)
    assert_one_line_error(proc, fragment)
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize(
    "args,message",
    [
        (["compare", "--out", "{tmp}/s", "--link-rate", "100mb"], "--link-rate '100mb' is not a rate"),
        (["simulate", "--backend", "ddp", "--link-rate", "fast"], "--link-rate 'fast' is not a rate"),
        (
            ["compare", "--out", "{tmp}/s", "--nodes", "64", "--nprocs", "1"],
            "--nodes 64: each simulated node needs a core",
        ),
        (["simulate", "--backend", "single"], "--backend single runs one process"),
        (["compare", "--out", "{tmp}/s", "--link-mode", "mesh"], "--link-mode"),
        (["simulate", "--backend", "ddp", "--link-mode", "mesh"], "--link-mode 'mesh'"),
        (
            ["simulate", "--backend", "ddp", "--nodes", "1", "--link-mode", "per-node", "--link-rate", "1gbit"],
            "--link-mode per-node --link-rate 1gbit with one node: a per-node link joins nodes and would carry nothing",
        ),
        (
            ["commbench", "--out", "{tmp}/s", "--link-mode", "per-node", "--link-rate", "1gbit"],
            "--link-mode per-node --link-rate 1gbit with one node",
        ),
    ],
    ids=[
        "compare-rate",
        "simulate-rate",
        "too-many-nodes",
        "simulate-single",
        "compare-mode",
        "simulate-mode",
        "simulate-per-node-alone",
        "commbench-per-node-alone",
    ],
)
def test_bad_topology_options_are_one_line(tmp_path, args, message):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    proc = run_here(args, tmp_path)
    assert proc.stderr.strip().splitlines() == [f"error: {proc.stderr.split('error: ', 1)[1].strip()}"]
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "s").exists()  # nothing started, nothing written


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--repeats", "0"], "--repeats must be positive"),
        (["--nprocs", "1,x"], "--nprocs must be comma-separated integers"),
        (["--accumulate", "0"], "--accumulate must be positive, got 0"),  # the run option's own check
        (["--grad-compression", "none,int8"], "--grad-compression: 'int8' is not one of none, fp16, bf16"),
        (["--backends", "ddp,nope"], "nope"),
        (["--threads", "0"], "--threads must be positive"),
    ],
    ids=["repeats", "nprocs", "accumulate", "compression", "backend", "threads"],
)
def test_bad_sweep_options_are_one_line_and_run_nothing(tmp_path, args, fragment):
    out = tmp_path / "cmp"
    assert_one_line_error(run_here(["compare", "--out", out, *args], tmp_path), fragment)
    assert not (out / "results.jsonl").exists()


@pytest.mark.parametrize(
    "args,fragments",
    [
        # the default global batch of 64 over 3 processes: on main, launched and failed as the sweep's only run
        (["--backends", "ddp", "--nprocs", "3"], ["error: ddp x3 ", "--batch-size 64", "divide evenly across 3"]),
        (["--nprocs", "2", "--accumulate", "1,3"], ["acc3 none: ", "must split into 3 equal micro-batches"]),
        (["--backends", "ddp", "--nprocs", "2", "--extra", "--batch-size 9"], ["ddp x2 ", "divide evenly across 2"]),
        (
            ["--backends", "ddp", "--nodes", "1,2", "--link-mode", "per-node", "--link-rate", "1gbit"],
            ["error: --link-mode per-node --link-rate 1gbit with one node: a per-node link joins nodes"],
        ),
        (["--extra", "--nope 3"], ["--extra '--nope 3': No such option: --nope"]),
        (["--extra", "--dropout 2"], ["error: --dropout must be in [0.0, 1.0), got 2.0"]),
        (["--extra", "--backend ddp"], ["--extra --backend: give it as compare's --backends"]),
        (["--extra", "--output x.json"], ["--extra --output: the sweep sets it for each run"]),
    ],
    ids=[
        "batch-world",
        "batch-accumulate",
        "batch-extra",
        "per-node-alone",
        "extra-unknown",
        "extra-bad",
        "extra-axis",
        "extra-set",
    ],
)
def test_a_sweep_that_cannot_run_is_refused_before_any_launch(tmp_path, args, fragments):
    """Every configuration is checked with the options its run will get before the first launch: what cannot run is
    one line naming it, exit 2, and nothing is written (no output folder, no sweep.json)."""
    out = tmp_path / "cmp"
    proc = run_here(["compare", "--max-steps", "5", "--out", out, *args], tmp_path)
    assert_one_line_error(proc, *fragments)
    assert "running" not in proc.stderr and not out.exists()


@pytest.mark.parametrize(
    "args,line",
    [
        (["comapre", "--backends", "ddp"], "error: unknown command 'comapre' (did you mean 'compare'?)"),
        (["slurm_script"], "error: unknown command 'slurm_script' (did you mean 'slurm-script'?)"),
        (
            ["help"],
            "error: unknown command 'help'; the commands: compare, simulate, report, check-task, commbench, "
            "project, atlas, profile, slurm-script (training takes options: run.py --help)",
        ),
    ],
    ids=["misspelled", "underscore", "no-such"],
)
def test_an_unknown_command_is_named_with_the_closest_one(tmp_path, args, line):
    proc = run_in(tmp_path, [sys.executable, "run.py", *args], timeout=60, expect_rc=2)
    assert proc.stderr.strip().splitlines() == [line]


def _run_bert(args, tmp_path, fresh=False):
    """run.py --task bert-sentiment ARGS: in a fresh process where a case loads transformers (its import-time
    output), else in this one (run_here)."""
    args = ["--task", "bert-sentiment", *args]
    if not fresh:
        return run_here(args, tmp_path, TRANSFORMERS_OFFLINE="1")
    return run_in(tmp_path, [sys.executable, "run.py", *args], timeout=120, expect_rc=None)


@pytest.mark.parametrize("case", ["missing_file", "empty_file", "unknown_model", "max_length", "head_lr"])
def test_bad_input(tmp_path, mini_mr, case):
    data = tmp_path / "mr"
    data.mkdir()
    args = ["--data-dir", str(data)]
    if case == "missing_file":
        (data / "rt-polarity.pos").write_text("good\n")
        fragment = "missing rt-polarity.neg"
    elif case == "empty_file":
        (data / "rt-polarity.pos").write_text("good\n")
        (data / "rt-polarity.neg").write_text("\n\n")
        fragment = "no sentences"
    elif case == "unknown_model":
        args = ["--data-dir", str(mini_mr), "--model", "no-such-org/no-such-bert"]
        fragment = "cannot load BERT model id 'no-such-org/no-such-bert'"
    elif case == "max_length":
        args = ["--data-dir", str(mini_mr), "--max-length", "100000"]
        fragment = "--max-length must be between"
    else:
        args = ["--data-dir", str(mini_mr), "--head-lr", "-1"]
        fragment = "--head-lr must be positive"
    assert_one_line_error(_run_bert(args, tmp_path, fresh=case == "unknown_model"), fragment)


def test_a_bad_download_through_the_cli(tmp_path):
    """End to end: the MR archive "downloaded" from a local file that is not one."""
    bogus = tmp_path / "not-a-tarball.tar.gz"
    bogus.write_bytes(b"not gzip at all")
    env = child_env(tmp_path, DISTBENCH_NO_DOWNLOAD="0", DISTBENCH_MR_URL=bogus.as_uri())
    proc = run_cmd(
        [sys.executable, "run.py", "--task", "bert-sentiment", "--model", "tiny-random", "--no-progress"],
        timeout=120,
        env=env,
        expect_rc=None,
    )
    assert_one_line_error(proc, "is not the expected .tar.gz archive")
    assert not (tmp_path / "cache" / "rt-polarity").exists() or not any((tmp_path / "cache" / "rt-polarity").iterdir())


def _digest(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def written_checkpoint(tmp_path_factory):
    """A checkpoint written at step 4 of a run (every case below refuses a copy of it)."""
    tmp = tmp_path_factory.mktemp("written")
    ckpt = tmp / "ckpt"
    args = [*RELIABLE, "--max-steps", "4", "--checkpoint-dir", str(ckpt), "--checkpoint-every", "2"]
    run_in(tmp, [sys.executable, "run.py", *args, "--output", str(tmp / "a.json")], timeout=120)
    return ckpt


@pytest.mark.multiproc
@pytest.mark.timeout(400)
@pytest.mark.parametrize("case", ["truncated", "other_task", "other_batch", "not_a_checkpoint"])
def test_bad_checkpoints_are_refused_and_left_alone(tmp_path, written_checkpoint, case):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(written_checkpoint, ckpt)
    f = ckpt / "checkpoint.pt"
    args = [*RELIABLE, "--max-steps", "8", "--checkpoint-dir", str(ckpt), "--output", str(tmp_path / "b.json")]
    if case == "truncated":
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
        fragment = "is corrupt"
    elif case == "not_a_checkpoint":
        f.write_bytes(b"just some bytes")
        fragment = "is corrupt"
    elif case == "other_task":
        args += [
            *"--task bert-sentiment --model tiny-random --data-dir".split(),
            str(write_mini_corpus(tmp_path / "mini-mr")),
        ]
        fragment = "--task mnist"
    else:
        args += ["--batch-size", "32"]
        fragment = "--batch-size 64"
    before = _digest(ckpt)
    assert_one_line_error(run_here(args, tmp_path), fragment)
    assert _digest(ckpt) == before
    assert not (tmp_path / "b.json").exists()
