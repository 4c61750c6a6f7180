# Every target sets up what it needs first (scripts/setup_env.sh is quick when already done).
PY := .venv/bin/python
.PHONY: setup demo test test-fast bench lint clean-venv

setup:
	@bash scripts/setup_env.sh

demo: setup
	$(PY) run.py --backend single

test: setup
	$(PY) -m pytest -q

test-fast: setup
	$(PY) -m pytest -q -m "not multiproc"

lint: setup
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

clean-venv:
	rm -f .venv
