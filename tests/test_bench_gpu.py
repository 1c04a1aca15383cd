"""benchmarks/bench_gpu.py: every workload runs (tiny sizes, CPU), writes its JSON, and compares equal weights."""

from __future__ import annotations

import importlib.util
import json

import torch
from conftest import REPO_ROOT, assert_same_outputs

spec = importlib.util.spec_from_file_location("bench_gpu", REPO_ROOT / "benchmarks" / "bench_gpu.py")
bench_gpu = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_gpu)


def test_dry_run_on_cpu_writes_every_workload(tmp_path):
    out = tmp_path / "gpu.json"
    bench_gpu.main(["--device", "cpu", "--tiny", "--repeats", "1", "--calls", "1", "--warmup", "0", "--out", str(out)])
    results = json.loads(out.read_text())
    assert out.with_suffix(".md").is_file()
    for key in (
        "transformer_base_train_ratio_vs_marian",
        "transformer_base_train_padded_3_8_ratio_vs_marian",
        "transformer_base_greedy8_ratio_vs_marian",
        "transformer_base_beam5_ratio_vs_marian",
        "transformer_small_train_ratio_vs_marian",
        "bert_base_mlm_train_ratio_vs_transformers",
        "bert_base_mlm_train_padded_4_16_ratio_vs_transformers",
        "lstm_lm_train_ratio_vs_bare_cudnn",
    ):
        assert results[key] > 0, key
    assert set(results["bert_base_mlm_train_mfu"]) == {"hf_seq", "transformers"}
    assert results["rnn_seq2seq_attention_train_tokens_per_s"] > 0
    assert results["bert_base_mlm_train_host_syncs"] == {"hf_seq": None, "transformers": None}  # counted on CUDA only


def test_peers_start_from_the_same_weights():
    """The BERT and LSTM-LM comparisons time the same function: equal losses before any step (dropout off)."""
    device = torch.device("cpu")
    size = bench_gpu.SIZES["lstm_lm"]["tiny"]
    ours, bare = (m.eval() for m in bench_gpu.lstm_pair(size, device))
    ids = torch.randint(3, size["V"], (3, 7))
    with torch.no_grad():
        assert_same_outputs(ours(input_ids=ids, labels=ids).loss, bare(input_ids=ids, labels=ids).loss)
    size = bench_gpu.SIZES["bert_base"]["tiny"]
    ours, peer = (m.eval() for m in bench_gpu.bert_pair(size, device))
    batch = bench_gpu.mlm_batch(size, size["padded"], device)
    with torch.no_grad():
        assert_same_outputs(ours(**batch).loss, peer(**batch).loss)
