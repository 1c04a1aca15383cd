# hf_seq — the README's commands. Every target creates/uses .venv.
PY      ?= python3
VENV    ?= .venv
VPY     := $(VENV)/bin/python
STAMP   := $(VENV)/.installed

.PHONY: demo test data bench lint venv clean-venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q torch==2.13.0
	$(VPY) -m pip install -q -e '.[test,bench,plot]'
	touch $(STAMP)

data: $(STAMP)
	PYTHON=$(VPY) bash scripts/fetch_data.sh

demo: $(STAMP) data
	$(VPY) scripts/demo.py

test: $(STAMP) data
	$(VPY) -m pytest -q -n 2 --dist loadfile -m "not slow"

test-all: $(STAMP) data
	$(VPY) -m pytest -q -n 2 --dist loadfile

lint: $(STAMP)
	$(VENV)/bin/ruff check hf_seq train_scripts benchmarks tests scripts

bench: $(STAMP) data
	$(VPY) benchmarks/run_all.py

clean-venv:
	rm -rf $(VENV)
