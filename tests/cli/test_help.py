"""`--help` of each command shows the launch commands and the options."""

import sys

from tests.helpers import run_cmd, run_in, run_py


def test_help_lists_every_launch_command(tmp_path):
    proc = run_py(["--help"], tmp_path, expect_rc=0)
    for cmd in (
        "torchrun --nproc_per_node N run.py --backend ddp",
        "--rdzv-endpoint",
        "accelerate launch --multi_gpu --num_processes N",
        "--num_machines",
        "horovodrun -np N python run.py --backend horovod",
        "-H host1:4,host2:4",
    ):
        assert cmd in proc.stdout, cmd


def test_help_shows_the_knobs():
    proc = run_cmd([sys.executable, "run.py", "--help"], timeout=60)
    assert "--accumulate" in proc.stdout and "--grad-compression" in proc.stdout
    proc = run_cmd([sys.executable, "run.py", "compare", "--help"], timeout=60)
    assert "--accumulate" in proc.stdout and "--grad-compression" in proc.stdout


def test_help_shows_the_multi_node_and_link_options(tmp_path):
    main_help = run_in(tmp_path, [sys.executable, "run.py", "--help"], timeout=60).stdout
    assert "run.py simulate --help" in main_help and "--link-rate" in main_help
    compare_help = run_in(tmp_path, [sys.executable, "run.py", "compare", "--help"], timeout=60).stdout
    simulate_help = run_in(tmp_path, [sys.executable, "run.py", "simulate", "--help"], timeout=60).stdout
    for option in ("--nodes", "--link-rate"):
        assert option in compare_help and option in simulate_help
