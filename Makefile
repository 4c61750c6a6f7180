# Every target sets up what it needs first (scripts/setup_env.sh is quick when already done).
PY := .venv/bin/python
.PHONY: setup demo test test-fast test-gpu bench bench-bert bench-network bench-fsdp bench-deepspeed lint clean-venv

setup:
	@bash scripts/setup_env.sh

# The main job, offline: ddp, accelerate and horovod at world size 2 against single on MNIST, 5 rounds in
# shuffled order (README: how long it took here); prints the table and the verdicts, leaves the report in a new
# results/demo-<time>/ folder.
demo: setup
	$(PY) run.py compare --task mnist --backends single,ddp,accelerate,horovod --nprocs 2 --max-steps 100 --repeats 5 --out results/demo-$$(date +%Y%m%d-%H%M%S)

# The tiers in two passes, sharing one folder of launched runs (tests/conftest.shared_folder: a run that several
# tests check is launched once). First, three at a time, each module on one worker: the unit and CLI tests, the
# benchmark scripts' smoke tests, the Slurm tests and the multi-process tier, which assert what was written and
# computed, never how fast; the suite is CPU-bound (31-35 core-minutes on 2 cores), and three workers keep both
# cores busy while a test waits on a launcher's rendezvous, a timeout or Slurm (2026-12-06, fresh clones: 18:06, 19:15
# and 20:01, against 20:02 once with the multi-process tier in a pass of its own, two at a time: no slower, and
# faster by less than the machine's noise shows for certain). Last, alone, the tests marked
# `alone`, whose checks depend on nothing else running (a shaped link's rate, the host's network namespaces). The
# exit status is a failure if either pass failed. Each pass hands out its modules the longest first
# (tests/durations.txt; xdist's reordering by test count is off).
test: setup
	@shared=$$(mktemp -d); export DISTBENCH_TEST_SHARED=$$shared; \
	$(PY) -m pytest -q -n 3 --dist loadfile --no-loadscope-reorder -m "not alone" tests/unit tests/cli tests/benchmarks tests/slurm tests/multiproc; first=$$?; \
	$(PY) -m pytest -q -m alone tests/multiproc; second=$$?; \
	rm -rf "$$shared"; exit $$(( first || second ))

test-fast: setup
	$(PY) -m pytest -q -m "not multiproc and not gpu"

# The GPU tier (tests/gpu): where no CUDA device is, every test is reported as not run, by name. On the GPU machine
# this project is lent at times, scripts/gpu_check.sh runs it with that machine's own python3 (docs/gpu.md).
test-gpu: setup
	$(PY) -m pytest -v -rs tests/gpu

# Benchmarks (minutes; run on a quiet machine): results are written to docs/.
bench: setup
	$(PY) -m benchmarks.accuracy
	$(PY) -m benchmarks.overhead
	$(PY) -m benchmarks.startup
	$(PY) -m benchmarks.scaling --out docs/performance.md --append

# BERT on MR polarity: one epoch over 3 seeds (about 20 minutes here), then distbench against the hand-written
# loops (about 25 minutes); MR_DIR: the rt-polarity folder, empty for the cache or a download.
MR_DIR ?= ../shared/data/rt-polarity
bench-bert: setup
	$(PY) -m benchmarks.bert_accuracy $(if $(MR_DIR),--data-dir $(MR_DIR))
	$(PY) -m benchmarks.overhead --task bert-sentiment $(if $(MR_DIR),--data-dir $(MR_DIR)) --pairs 5 --steps 40 --world-sizes 2

# Two simulated nodes over unshaped, 1 Gbit/s and 100 Mbit/s links (needs root or user namespaces; about 25 minutes
# for MNIST, 35 for BERT here), then docs/network.md's tables and its link check.
bench-network: setup
	$(PY) run.py compare --task mnist --backends single,ddp,accelerate,horovod --nprocs 1 --nodes 2 --link-rate none,1gbit,100mbit --max-steps 100 --repeats 5 --out results/network-mnist-$$(date +%Y%m%d-%H%M%S)
	$(PY) run.py compare --task bert-sentiment $(if $(MR_DIR),--data-dir $(MR_DIR)) --backends single,ddp,accelerate,horovod --nprocs 1 --nodes 2 --link-rate none,1gbit,100mbit --max-steps 6 --repeats 3 --out results/network-bert-$$(date +%Y%m%d-%H%M%S)
	$(PY) -m benchmarks.linkcheck check --rates none,10gbit,1gbit,100mbit --out docs/network.md
	@echo "then: python -m benchmarks.network results/network-mnist-* results/network-bert-* --out docs/network.md"

# docs/fsdp.md: memory per rank and speed of ddp, fsdp and accelerate-fsdp at x1 and x2 on three tasks
FSDP_SWEEP = --backends single,ddp,fsdp,accelerate-fsdp --nprocs 1,2
bench-fsdp: setup
	$(PY) run.py compare --task mnist $(FSDP_SWEEP) --max-steps 60 --repeats 5 --out docs/results/fsdp/mnist
	$(PY) run.py compare --task synthetic-resnet --model resnet18 --batch-size 16 $(FSDP_SWEEP) --max-steps 8 --repeats 5 --out docs/results/fsdp/synthetic-resnet
	$(PY) run.py compare --task bert-sentiment $(if $(MR_DIR),--data-dir $(MR_DIR)) $(FSDP_SWEEP) --max-steps 8 --repeats 5 --out docs/results/fsdp/bert
	$(PY) -m benchmarks.fsdp docs/results/fsdp/mnist docs/results/fsdp/synthetic-resnet docs/results/fsdp/bert --out docs/fsdp.md

# DeepSpeed's ZeRO stages against ddp and fsdp at world sizes 1 and 2, 5 rounds (docs/deepspeed.md; about 70 minutes
# here: MNIST 12, ResNet-18 25, the MiniLM 33)
DS_SWEEP = --backends single,ddp,fsdp,deepspeed --zero-stage 0,1,2,3 --nprocs 1,2 --repeats 5
bench-deepspeed: setup
	$(PY) run.py compare --task mnist $(DS_SWEEP) --max-steps 40 --out docs/results/deepspeed/mnist
	$(PY) run.py compare --task synthetic-resnet --model resnet18 --batch-size 16 $(DS_SWEEP) --max-steps 6 --out docs/results/deepspeed/synthetic-resnet
	$(PY) run.py compare --task bert-sentiment $(if $(MR_DIR),--data-dir $(MR_DIR)) $(DS_SWEEP) --max-steps 6 --out docs/results/deepspeed/bert
	$(PY) -m benchmarks.fsdp docs/results/deepspeed/mnist docs/results/deepspeed/synthetic-resnet docs/results/deepspeed/bert --out docs/deepspeed.md

lint: setup
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

clean-venv:
	rm -f .venv
