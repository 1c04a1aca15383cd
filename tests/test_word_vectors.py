"""Pretrained word vectors into a recurrent model's embedding (hf_seq.toolkit.word_vectors), on tiny vector files."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hf_seq.train_scripts import train_classifier, train_tagger
from hf_seq.train_scripts.arguments import RecipeError

import hf_seq
from hf_seq import (
    HfSeqRNNConfig,
    RNNForSequenceClassification,
    WordVectorError,
    embedding_matrix,
    init_embeddings_from_vectors,
    load_word_vectors,
)
from hf_seq.toolkit.tokenization import build_word_level_tokenizer

# a GloVe-format file: no header, lower-cased words, 4 values each
GLOVE = {
    "the": [0.418, 0.24968, -0.41242, 0.1217],
    "cat": [0.45281, -0.50108, -0.53714, -0.015697],
    "sat": [-0.6, 0.1, 0.25, 0.75],
    "mat": [1.5, -2.0, 0.125, 0.0],
    "dog": [0.11008, -0.38781, -0.57615, -0.27714],
}
TEXTS = ["The cat sat on the mat", "the dog sat", "a cat , a dog"]


def write_glove(path, rows=GLOVE, header=False):
    lines = [f"{len(rows)} {len(next(iter(rows.values())))}"] if header else []
    lines += [" ".join([word, *map(str, values)]) for word, values in rows.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def expected(word) -> torch.Tensor:
    return torch.from_numpy(np.array(GLOVE[word], dtype=np.float32))


def tiny_model(tokenizer, embedding_size=4, freeze=False):
    config = HfSeqRNNConfig(
        vocab_size=len(tokenizer),
        embedding_size=embedding_size,
        hidden_size=6,
        cell="lstm",
        num_labels=2,
        pad_token_id=tokenizer.pad_token_id,
        freeze_embeddings=freeze,
    )
    return RNNForSequenceClassification(config)


@pytest.fixture
def tokenizer():
    return build_word_level_tokenizer(TEXTS)  # lower-cased: [PAD], [UNK], the, a, cat, ..., on


def test_rows_of_known_words_equal_the_file_vectors_and_coverage_is_reported(tmp_path, tokenizer):
    model = tiny_model(tokenizer)
    before = model.get_input_embeddings().weight.detach().clone()
    coverage = init_embeddings_from_vectors(model, tokenizer, write_glove(tmp_path / "glove.txt"), freeze=False)
    table = model.get_input_embeddings().weight.detach()
    vocab = tokenizer.get_vocab()
    for word in GLOVE:
        assert torch.equal(table[vocab[word]], expected(word)), word
    assert torch.equal(table[tokenizer.pad_token_id], torch.zeros(4))
    words = set(vocab) - {"[PAD]", "[UNK]"}
    assert coverage.found == 5 and coverage.words == len(words) == 8
    assert set(coverage.missing_words) == {"a", "on", ","} and coverage.coverage == pytest.approx(5 / 8)
    assert "5 of 8 words (62.5 %)" in str(coverage) and coverage.to_dict()["missing"] == 3
    # missing words get new vectors (not the model's rows), the trainable table keeps its gradient
    assert not torch.equal(table[vocab["on"]], before[vocab["on"]])
    assert model.get_input_embeddings().weight.requires_grad and not model.config.freeze_embeddings
    ids = [tokenizer("the cat on a mat")["input_ids"]]
    assert coverage.token_coverage(ids) == pytest.approx(3 / 5)


def test_text_npy_parquet_and_folder_give_the_same_table(tmp_path, tokenizer):
    text = load_word_vectors(write_glove(tmp_path / "glove.txt"))
    header = load_word_vectors(write_glove(tmp_path / "w2v.vec", header=True))
    folder = tmp_path / "glove-npy"
    folder.mkdir()
    np.save(folder / "emb.npy", np.array(list(GLOVE.values()), dtype=np.float32))
    pq.write_table(pa.table({"word": list(GLOVE)}), folder / "index.parquet")
    (tmp_path / "words.txt").write_text("\n".join(GLOVE) + "\n", encoding="utf-8")
    from_folder = load_word_vectors(folder)
    from_npy = load_word_vectors(folder / "emb.npy", words=tmp_path / "words.txt")
    reference, _ = embedding_matrix(text, tokenizer)
    for vectors in (header, from_folder, from_npy):
        assert vectors.words == list(GLOVE) and vectors.dim == 4
        assert torch.equal(embedding_matrix(vectors, tokenizer)[0], reference)
    with pytest.raises(WordVectorError, match=r"emb\.npy holds only the vectors: pass its word list"):
        load_word_vectors(folder / "emb.npy")


def test_lowercase_fallback_for_a_cased_vocabulary(tmp_path):
    cased = build_word_level_tokenizer(TEXTS, lowercase=False)
    vectors = load_word_vectors(write_glove(tmp_path / "glove.txt"))
    matrix, coverage = embedding_matrix(vectors, cased)
    vocab = cased.get_vocab()
    assert torch.equal(matrix[vocab["The"]], expected("the")) and torch.equal(matrix[vocab["the"]], expected("the"))
    assert coverage.found_lowercased == 1
    _, strict = embedding_matrix(vectors, cased, lowercase_fallback=False)
    assert strict.found == coverage.found - 1 and "The" in strict.missing_words


def test_missing_word_initialisations(tmp_path, tokenizer):
    vectors = load_word_vectors(write_glove(tmp_path / "glove.txt"))
    on = tokenizer.get_vocab()["on"]
    file_mean = torch.tensor(list(GLOVE.values())).mean(0)
    assert torch.equal(embedding_matrix(vectors, tokenizer, missing="zeros")[0][on], torch.zeros(4))
    torch.testing.assert_close(embedding_matrix(vectors, tokenizer, missing="mean")[0][on], file_mean)
    initial = torch.randn(len(tokenizer), 4)
    assert torch.equal(embedding_matrix(vectors, tokenizer, initial, missing="model")[0][on], initial[on])
    first, _ = embedding_matrix(vectors, tokenizer, missing="normal", seed=3)
    again, _ = embedding_matrix(vectors, tokenizer, missing="normal", seed=3)
    assert torch.equal(first, again) and not torch.equal(first[on], first[tokenizer.get_vocab()["a"]])
    with pytest.raises(ValueError, match=r"`missing` must be one of"):
        embedding_matrix(vectors, tokenizer, missing="uniform")


def test_frozen_rows_stay_unchanged_by_training(tmp_path, tokenizer):
    torch.manual_seed(0)
    model = tiny_model(tokenizer)
    init_embeddings_from_vectors(model, tokenizer, write_glove(tmp_path / "glove.txt"), freeze=True)
    frozen = model.get_input_embeddings().weight.detach().clone()
    head = model.classifier.weight.detach().clone()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    for _ in range(3):
        loss = model(**batch, labels=torch.tensor([0, 1, 1])).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    assert model.config.freeze_embeddings
    assert torch.equal(model.get_input_embeddings().weight, frozen)
    assert not torch.equal(model.classifier.weight, head)  # the layers above did train
    model.save_pretrained(tmp_path / "saved")
    again = RNNForSequenceClassification.from_pretrained(tmp_path / "saved")
    assert again.config.freeze_embeddings and torch.equal(again.get_input_embeddings().weight, frozen)


def test_dimension_mismatch_names_both_sizes(tmp_path, tokenizer):
    model = tiny_model(tokenizer, embedding_size=6)
    with pytest.raises(
        WordVectorError, match=r"glove\.txt has 4-dimensional vectors but the model's embedding_size is 6"
    ):
        init_embeddings_from_vectors(model, tokenizer, write_glove(tmp_path / "glove.txt"))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("the 0.1 0.2 0.3\ncat 0.1 0.2\n", r"bad\.txt, line 2: 2 values where the file's vectors have 3"),
        ("the 0.1 0.2 0.3\ncat 0.1 x 0.3\n", r"bad\.txt, line 2: not a vector of numbers"),
        ("the 0.1 0.2 0.3\ncat 0.1 nan 0.3\n", r"bad\.txt: vector 1 holds NaN or infinite values"),
        (b"the 0.1 \xff\xfe 0.3\n", r"bad\.txt is not a readable UTF-8 word-vector text file"),
        ("", r"bad\.txt holds no vectors"),
    ],
)
def test_damaged_text_files_name_the_file(tmp_path, content, message):
    path = tmp_path / "bad.txt"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(WordVectorError, match=message):
        load_word_vectors(path)


def test_damaged_npy_parquet_and_installed_folder_name_the_file(tmp_path):
    folder = tmp_path / "glove-6b-50d"
    folder.mkdir()
    np.save(folder / "emb.npy", np.array(list(GLOVE.values()), dtype=np.float32))
    pq.write_table(pa.table({"word": list(GLOVE)}), folder / "index.parquet")
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    (broken / "emb.npy").write_bytes((folder / "emb.npy").read_bytes()[:100])  # truncated
    with pytest.raises(WordVectorError, match=r"broken/emb\.npy is not a readable \.npy file"):
        load_word_vectors(broken)
    shutil.copy(folder / "emb.npy", broken / "emb.npy")
    (broken / "index.parquet").write_bytes(b"PAR1 not parquet")
    with pytest.raises(WordVectorError, match=r"broken/index\.parquet is not a readable parquet file"):
        load_word_vectors(broken)
    pq.write_table(pa.table({"word": list(GLOVE)[:3]}), broken / "index.parquet")
    with pytest.raises(WordVectorError, match=r"emb\.npy has 5 vectors but its word list .*index\.parquet has 3"):
        load_word_vectors(broken)
    # an installed folder (`make pretrained` writes SHA256SUMS): a flipped byte is named even if it still parses
    from hf_seq.toolkit.checksums import write_manifest

    write_manifest(folder)
    assert len(load_word_vectors(folder)) == 5
    data = bytearray((folder / "emb.npy").read_bytes())
    data[-1] ^= 1
    (folder / "emb.npy").write_bytes(bytes(data))
    with pytest.raises(WordVectorError, match=r"glove-6b-50d/emb\.npy is damaged .*`make pretrained`"):
        load_word_vectors(folder)
    with pytest.raises(WordVectorError, match=r"nowhere do not exist .*make pretrained"):
        load_word_vectors(tmp_path / "nowhere")


def test_tokenizer_keeps_rare_vector_words_and_extra_words():
    texts = ["good good good film", "good film", "a zyzzyva"]
    top = build_word_level_tokenizer(texts, max_vocab_size=4)  # [PAD] [UNK] good film
    assert set(top.get_vocab()) == {"[PAD]", "[UNK]", "good", "film"}
    kept = build_word_level_tokenizer(texts, max_vocab_size=4, also_keep={"zyzzyva", "unseen"})
    assert set(kept.get_vocab()) == {"[PAD]", "[UNK]", "good", "film", "zyzzyva"}  # seen words only
    extra = build_word_level_tokenizer(texts, max_vocab_size=4, extra_words=["unseen", "good"])
    assert extra.get_vocab()["unseen"] == 4 and len(extra) == 5


def test_python_api_is_exported():
    assert hf_seq.init_embeddings_from_vectors is init_embeddings_from_vectors
    assert hf_seq.load_word_vectors is load_word_vectors


# --------------------------------------------------------------------- through the train scripts (own tiny data)
TINY = ["--max_steps", "2", "--save_strategy", "no", "--eval_strategy", "no", "--load_best_model_at_end", "false"]
TINY += ["--report_to", "none", "--per_device_train_batch_size", "4", "--logging_steps", "1"]


def test_train_classifier_with_frozen_vectors_and_their_vocabulary(tmp_path, capsys):
    rows = [{"text": t, "label": i % 2} for i, t in enumerate(TEXTS * 4)]
    for split in ("train", "validation", "test"):
        (tmp_path / f"{split}.jsonl").write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    glove = write_glove(tmp_path / "glove.txt", GLOVE | {"unseenword": [0.5, 0.5, 0.5, 0.5]})
    model_config = {"cell": "lstm", "embedding_size": 4, "hidden_size": 6, "freeze_embeddings": True}
    results = train_classifier.main(
        [
            *("--train_file", str(tmp_path / "train.jsonl"), "--validation_file", str(tmp_path / "validation.jsonl")),
            *("--test_file", str(tmp_path / "test.jsonl"), "--output_dir", str(tmp_path / "run")),
            *("--model_type", "hf_seq_rnn", "--model_config", json.dumps(model_config)),
            *("--pretrained_embeddings", str(glove), "--pretrained_vocabulary", "add_all_vector_words"),
            *TINY,
        ]
    )
    report = results["pretrained_coverage"]
    assert report["found"] == 6 and report["missing"] == 3 and report["missing_init"] == "normal"
    assert 0.0 < report["train_token_coverage"] < 1.0
    model = RNNForSequenceClassification.from_pretrained(tmp_path / "run")
    from transformers import AutoTokenizer

    vocab = AutoTokenizer.from_pretrained(tmp_path / "run").get_vocab()
    assert "unseenword" in vocab  # a vector word never seen in training is in the vocabulary
    table = model.get_input_embeddings().weight
    assert model.config.freeze_embeddings and torch.equal(table[vocab["cat"]], expected("cat"))
    # only the file's first N words join (GloVe: its most frequent), split as GloVe's text
    results = train_classifier.main(
        [
            *("--train_file", str(tmp_path / "train.jsonl"), "--validation_file", str(tmp_path / "validation.jsonl")),
            *("--test_file", str(tmp_path / "test.jsonl"), "--output_dir", str(tmp_path / "run_top")),
            *("--model_type", "hf_seq_rnn", "--model_config", json.dumps(model_config)),
            *("--pretrained_embeddings", str(glove), "--pretrained_vocabulary", "add_all_vector_words"),
            *("--pretrained_vocabulary_limit", "2", "--word_pre_tokenizer", "glove"),
            *TINY,
        ]
    )
    top = AutoTokenizer.from_pretrained(tmp_path / "run_top")
    assert "unseenword" not in top.get_vocab() and len(top) == len(vocab) - 1  # "unseenword" is the last row
    words = [w for w, _ in top.backend_tokenizer.pre_tokenizer.pre_tokenize_str("a cat's mat.")]
    assert words == ["a", "cat", "'s", "mat", "."]
    for flags, message in (
        (["--pretrained_vocabulary_limit", "0"], r"`pretrained_vocabulary_limit` must be a positive"),
        (["--pretrained_vocabulary_limit", "5", "--pretrained_vocabulary", "add_vector_words"], r"only applies"),
        (["--word_pre_tokenizer", "spaces"], r"word_pre_tokenizer.*invalid choice: 'spaces'"),
        (
            ["--word_pre_tokenizer", "glove", "--tokenizer_kind", "wordpiece"],
            r"`word_pre_tokenizer` 'glove' shapes a new",
        ),
    ):
        capsys.readouterr()
        with pytest.raises((RecipeError, SystemExit)) as raised:  # argparse's own choice check: on stderr
            train_classifier.main(
                [
                    *("--train_file", str(tmp_path / "train.jsonl"), "--output_dir", str(tmp_path / "bad")),
                    *("--pretrained_embeddings", str(glove), *flags, *TINY),
                ]
            )
        assert re.search(message, str(raised.value) + capsys.readouterr().err)
    with pytest.raises(WordVectorError, match=r"4-dimensional vectors but the model's embedding_size is 8"):
        train_tagger.main(
            [
                *("--train_file", str(tmp_path / "tags.jsonl"), "--output_dir", str(tmp_path / "tagger")),
                *("--pretrained_embeddings", str(glove), "--config_overrides", "embedding_size=8,hidden_size=4"),
                *TINY,
            ]
        )


@pytest.fixture(autouse=True)
def _tags_file(tmp_path):
    rows = [{"tokens": t.split(), "tags": (["X", "Y"] * 4)[: len(t.split())]} for t in TEXTS * 4]
    (tmp_path / "tags.jsonl").write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")


def projected_model(tokenizer, activation="tanh"):
    config = HfSeqRNNConfig(
        vocab_size=len(tokenizer),
        embedding_size=4,
        embedding_projection_size=10,
        embedding_projection_activation=activation,
        hidden_size=6,
        cell="lstm",
        bidirectional=True,
        num_labels=2,
        pad_token_id=tokenizer.pad_token_id,
        freeze_embeddings=True,
    )
    return RNNForSequenceClassification(config)


def test_projection_over_frozen_vectors_trains_and_round_trips(tmp_path, tokenizer):
    torch.manual_seed(0)
    model = projected_model(tokenizer)
    init_embeddings_from_vectors(model, tokenizer, write_glove(tmp_path / "glove.txt"), freeze=True)
    assert model.rnn.encoder.layers[0].input_size == 10  # the LSTM reads the projected vectors
    frozen = model.get_input_embeddings().weight.detach().clone()
    projection = model.rnn.embedding_projection.dense.weight.detach().clone()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    for _ in range(3):
        model(**batch, labels=torch.tensor([0, 1, 1])).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    assert torch.equal(model.get_input_embeddings().weight, frozen)  # the frozen rows did not move
    assert not torch.equal(model.rnn.embedding_projection.dense.weight, projection)  # the projection trained
    model.eval()
    with torch.no_grad():
        logits = model(**batch).logits
        # the projection is what the recurrent stack reads: inputs_embeds (E wide) go through it too
        vectors = model.get_input_embeddings()(batch["input_ids"])
        from_vectors = model(inputs_embeds=vectors, attention_mask=batch["attention_mask"]).logits
    torch.testing.assert_close(from_vectors, logits, rtol=1e-6, atol=1e-6)
    model.save_pretrained(tmp_path / "saved")
    again = RNNForSequenceClassification.from_pretrained(tmp_path / "saved").eval()
    assert again.config.embedding_projection_size == 10 and again.config.embedding_projection_activation == "tanh"
    assert {k: v.shape for k, v in again.state_dict().items()} == {k: v.shape for k, v in model.state_dict().items()}
    for name, tensor in model.state_dict().items():
        assert torch.equal(again.state_dict()[name], tensor), name
    with torch.no_grad():
        torch.testing.assert_close(again(**batch).logits, logits, rtol=1e-6, atol=1e-6)


def test_folder_saved_without_the_projection_fields_loads_unchanged(tmp_path, tokenizer):
    torch.manual_seed(0)
    model = tiny_model(tokenizer, freeze=True).eval()
    model.save_pretrained(tmp_path / "old")
    config_file = tmp_path / "old" / "config.json"
    fields = json.loads(config_file.read_text())
    for name in ("embedding_projection_size", "embedding_projection_activation", "trainable_embedding_size"):
        fields.pop(name, None)  # as written before the fields existed
    config_file.write_text(json.dumps(fields))
    again = RNNForSequenceClassification.from_pretrained(tmp_path / "old").eval()
    assert again.config.embedding_projection_size is None and again.rnn.embedding_projection is None
    assert again.config.trainable_embedding_size is None and again.rnn.embeddings.trainable_embeddings is None
    assert not any("embedding_projection" in name or "trainable" in name for name in again.state_dict())
    assert again.state_dict().keys() == model.state_dict().keys()
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(again(**batch).logits, model(**batch).logits, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"embedding_projection_size": 0}, r"`embedding_projection_size` must be a positive integer, got 0"),
        ({"embedding_projection_size": 8.5}, r"`embedding_projection_size` must be a positive integer"),
        (
            {"embedding_projection_size": 8, "embedding_projection_activation": "sigmoid"},
            r"`embedding_projection_activation` must be one of \['linear', 'tanh', 'relu', 'gelu'\], got 'sigmoid'",
        ),
    ],
)
def test_projection_config_errors_name_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        HfSeqRNNConfig(vocab_size=10, embedding_size=4, **fields)


def test_projection_with_cell_none_sets_the_feature_width(tokenizer):
    config = HfSeqRNNConfig(
        vocab_size=len(tokenizer), embedding_size=4, cell="none", pooling="mean", embedding_projection_size=7
    )
    model = RNNForSequenceClassification(config)
    assert config.feature_size == 7 and model.classifier.in_features == 7
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    assert model(**batch).logits.shape == (3, 2)


def two_channel_model(tokenizer, **fields):
    config = HfSeqRNNConfig(
        vocab_size=len(tokenizer),
        embedding_size=4,
        trainable_embedding_size=3,
        hidden_size=6,
        cell="lstm",
        bidirectional=True,
        num_labels=2,
        pad_token_id=tokenizer.pad_token_id,
        freeze_embeddings=True,
        **fields,
    )
    return RNNForSequenceClassification(config)


@pytest.mark.parametrize("projection", [None, 5])
def test_two_channel_frozen_vectors_beside_a_trainable_table(tmp_path, tokenizer, projection):
    torch.manual_seed(0)
    model = two_channel_model(tokenizer, embedding_projection_size=projection)
    init_embeddings_from_vectors(model, tokenizer, write_glove(tmp_path / "glove.txt"), freeze=True)
    assert model.config.embedding_output_size == 7
    assert model.rnn.encoder.layers[0].input_size == (7 if projection is None else 5)
    frozen = model.get_input_embeddings().weight.detach().clone()
    channel = model.rnn.embeddings.trainable_embeddings.weight.detach().clone()
    assert torch.equal(channel[tokenizer.pad_token_id], torch.zeros(3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.0)
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    for _ in range(3):
        model(**batch, labels=torch.tensor([0, 1, 1])).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    assert torch.equal(model.get_input_embeddings().weight, frozen)  # the pretrained channel did not move
    trained = model.rnn.embeddings.trainable_embeddings.weight.detach()
    cat = tokenizer.convert_tokens_to_ids("cat")
    assert not torch.equal(trained[cat], channel[cat])  # the second channel learned
    model.eval()
    with torch.no_grad():
        logits = model(**batch).logits
        both = torch.cat([frozen[batch["input_ids"]], trained[batch["input_ids"]]], dim=-1)  # (B, T, 4 + 3)
        from_vectors = model(inputs_embeds=both, attention_mask=batch["attention_mask"]).logits
    torch.testing.assert_close(from_vectors, logits, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match=r"`inputs_embeds` must have shape \(batch, seq_len, 7\)"):
        model(inputs_embeds=frozen[batch["input_ids"]])  # the pretrained channel alone is too narrow
    model.save_pretrained(tmp_path / "saved")
    again = RNNForSequenceClassification.from_pretrained(tmp_path / "saved").eval()
    assert again.config.trainable_embedding_size == 3 and again.config.freeze_embeddings
    for name, tensor in model.state_dict().items():
        assert torch.equal(again.state_dict()[name], tensor), name
    with torch.no_grad():
        torch.testing.assert_close(again(**batch).logits, logits, rtol=1e-6, atol=1e-6)
    again.resize_token_embeddings(len(tokenizer) + 2, mean_resizing=False)  # both tables grow together
    assert again.rnn.embeddings.trainable_embeddings.num_embeddings == len(tokenizer) + 2
    assert again(input_ids=torch.tensor([[len(tokenizer) + 1, 2]])).logits.shape == (1, 2)


def test_two_channel_config_error_names_the_field():
    with pytest.raises(ValueError, match=r"`trainable_embedding_size` must be a positive integer, got -1"):
        HfSeqRNNConfig(vocab_size=10, embedding_size=4, trainable_embedding_size=-1)
