# hf_seq — the README's commands. Every target creates/uses .venv.
PY      ?= python3
VENV    ?= .venv
VPY     := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
# The transformers release `make` installs: the one tests/transformers_common was vendored from (its PROVENANCE.md).
# The package accepts any release of its range (pyproject.toml); `make test-compat` runs the others.
TRANSFORMERS_RELEASE := 5.25.0
# The torch release `make` installs before the package: the CPU build pip finds on local disk. The package declares
# only a lower bound (pyproject.toml), which this release satisfies, so `pip install -e .` keeps it; `make
# test-compat` runs the other releases of the range.
TORCH_RELEASE := 2.13.0

.PHONY: demo test test-all test-browser test-compat data pretrained bench bench-gpu lint venv clean-venv

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q 'torch==$(TORCH_RELEASE)'
	$(VPY) -m pip install -q -e '.[test,bench,plot,demo,tracking]' 'transformers==$(TRANSFORMERS_RELEASE)'
	touch $(STAMP)

data: $(STAMP)
	PYTHON=$(VPY) bash scripts/fetch_data.sh

# Pretrained checkpoints into data/pretrained/ (idempotent): all-MiniLM-L6-v2 for finetune_bert.py, GloVe 6B 50-d word
# vectors (glove-6b-50d) for --pretrained_embeddings
pretrained: $(STAMP)
	PYTHON=$(VPY) bash scripts/fetch_pretrained.sh

demo: $(STAMP) data
	$(VPY) scripts/demo.py $(DEMO_ARGS)

test: $(STAMP) data
	$(VPY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m "not slow"

# The demo page's browser tests (tests/test_demo_browser.py, marker `browser`) in Debian's headless Chromium; `make test`
# runs them too where /usr/bin/chromium is installed and skips them otherwise. Playwright's own browser download is never
# used (no `playwright install`).
test-browser: $(STAMP)
	test -x /usr/bin/chromium || (apt-get update -q && apt-get install -y -q chromium)
	$(VPY) -m pytest -q -m browser tests/test_demo_browser.py

test-all: $(STAMP) data
	$(VPY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder

# The compatibility matrix on every transformers release and every torch release of tests/compat_envs.py (one cached
# venv each under .compat/; `make test` runs the oldest transformers, the rest of the suite the installed releases),
# and the wheel installed beside the newest and the oldest torch (tests/test_torch_range.py). One process: a
# release's tests share its venv.
test-compat: $(STAMP)
	HF_SEQ_COMPAT_RELEASES=all HF_SEQ_COMPAT_TORCH=all $(VPY) -m pytest -q tests/test_compat.py tests/test_torch_range.py

lint: $(STAMP)
	$(VENV)/bin/ruff check hf_seq hf_seq_cli.py train_scripts benchmarks tests scripts

# The README's speed and baseline figures (each script writes benchmarks/results/<name>.json).
bench: $(STAMP) data
	$(VPY) benchmarks/baseline_tfidf.py
	$(VPY) benchmarks/param_counts_rnn.py
	$(VPY) benchmarks/bench_rnn.py --repeats 31
	$(VPY) benchmarks/bench_generate_rnn.py --repeats 3
	$(VPY) benchmarks/bench_generate_seq2seq.py --batch 32 --new_tokens 30 --repeats 2
	$(VPY) benchmarks/bench_transformer.py --threads 1 --repeats 7 --train-steps 3
	$(VPY) benchmarks/bench_bert.py --threads 1 --repeats 7 --steps 2
	$(VPY) benchmarks/bench_multiprocess.py --minutes 1

# GPU speed against Marian, transformers' BERT and bare cuDNN, bf16 (needs CUDA): benchmarks/results/gpu_<device>.json
bench-gpu: $(STAMP)
	$(VPY) benchmarks/bench_gpu.py --compile

clean-venv:
	rm -rf $(VENV)
