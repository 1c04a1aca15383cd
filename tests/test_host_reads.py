"""Host reads per decoding step of ``generate()``: no hf_seq family reads more than transformers' own loop needs.

A host read (``.item()``, ``bool(t)``, ``int(t)``: the profiler's ``aten::_local_scalar_dense``, and operators whose
output shape depends on values, such as ``nonzero``) is free on CPU but stops an accelerator's queue until the device
catches up. These tests count them with ``torch.profiler`` on CPU, per generated token (the difference between two
``generate()`` calls that differ only in ``max_new_tokens``, so the prompt's forward cancels out), greedy and beam 5,
on a padded batch and on one without padding, and compare, in the same process:

* the hf_seq Transformer with ``transformers``' ``MarianMTModel`` of the same sizes (the issue's criterion: at or
  below Marian's);
* every generative family with a model that reads nothing itself (:class:`LoopOnlyLM`): what is left is what
  ``GenerationMixin``'s loop reads (its stopping check, one read a step in transformers 5.x), the floor no model can
  go below. Measured rather than hard-coded, so a release whose loop reads more or less moves the budget with it.

The checks that read values are not lost: the prompt's ids are still checked (a ``ValueError`` from ``generate()``),
and a forward called directly with a cache checks its ids at every call.
"""

from __future__ import annotations

import collections

import pytest
import torch
from torch import nn
from transformers import GenerationMixin, MarianConfig, MarianMTModel, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

import hf_seq
from hf_seq import fast_paths
from hf_seq.compat import output_cache
from hf_seq.validation import value_checks_disabled

PAD, BOS, EOS = 0, 2, 3
VOCAB = 40

# operators that read a value on the host (``item``/``is_nonzero`` go through ``_local_scalar_dense``, counted once)
# or whose output shape depends on values (an accelerator waits for them too)
READ_EVENTS = ("aten::_local_scalar_dense", "aten::nonzero", "aten::equal", "aten::masked_select", "aten::_unique2")


class LoopOnlyConfig(PretrainedConfig):
    model_type = "hf_seq_test_loop_only"

    def __init__(self, vocab_size: int = VOCAB, hidden_size: int = 8, **kwargs) -> None:
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = 1  # generate() sizes its (unused) cache with it
        super().__init__(**kwargs)


class LoopOnlyLM(PreTrainedModel, GenerationMixin):
    """A decoder-only LM whose forward reads nothing on the host (embedding → linear, no cache, no mask): the
    host reads of its ``generate()`` are those of ``GenerationMixin``'s loop alone."""

    config_class = LoopOnlyConfig

    def __init__(self, config: LoopOnlyConfig) -> None:
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.head = nn.Linear(config.hidden_size, config.vocab_size)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, **kwargs) -> CausalLMOutputWithPast:
        return CausalLMOutputWithPast(logits=self.head(self.embed(input_ids)))  # (B, T, V)


def read_counts(fn) -> collections.Counter:
    """The host-read operators ``fn()`` runs, by name, as ``torch.profiler`` records them on CPU."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return collections.Counter({e.key: e.count for e in prof.key_averages() if e.key in READ_EVENTS})


def reads_per_step(model, inputs: dict, num_beams: int, short: int = 2, long: int = 10) -> float:
    """Host reads per generated token: (reads of a ``long``-token generate - reads of a ``short`` one) / the
    difference; ``min_new_tokens`` keeps EOS from ending either early."""

    def generate(n: int) -> None:
        out = model.generate(
            **inputs, num_beams=num_beams, do_sample=False, max_new_tokens=n, min_new_tokens=n, use_cache=True
        )
        assert out.shape[1] - (inputs["input_ids"].shape[1] if not model.config.is_encoder_decoder else 1) == n

    with torch.no_grad():
        generate(short)  # warm-up: first-call work (lazy imports, caches) stays out of the count
        few, many = read_counts(lambda: generate(short)), read_counts(lambda: generate(long))
    return (sum(many.values()) - sum(few.values())) / (long - short)


def tiny_transformer() -> hf_seq.TransformerForConditionalGeneration:
    config = hf_seq.HfSeqTransformerConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        encoder_layers=2,
        decoder_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        dropout=0.0,
        max_position_embeddings=64,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
    )
    return hf_seq.TransformerForConditionalGeneration(config).eval()


def tiny_marian() -> MarianMTModel:
    config = MarianConfig(
        vocab_size=VOCAB,
        d_model=16,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_position_embeddings=64,
        pad_token_id=PAD,
        eos_token_id=EOS,
        bos_token_id=BOS,
        decoder_start_token_id=BOS,
        forced_eos_token_id=None,
    )
    model = MarianMTModel._from_config(config, attn_implementation="sdpa").eval()
    model.generation_config.forced_eos_token_id = None
    return model


def tiny_rnn_lm() -> hf_seq.RNNForCausalLM:
    config = hf_seq.HfSeqRNNConfig(
        vocab_size=VOCAB,
        embedding_size=8,
        hidden_size=8,
        num_hidden_layers=2,
        cell="lstm",
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
    )
    return hf_seq.RNNForCausalLM(config).eval()


def tiny_rnn_seq2seq() -> hf_seq.RNNSeq2SeqForConditionalGeneration:
    config = hf_seq.HfSeqRNNSeq2SeqConfig(
        vocab_size=VOCAB,
        embedding_size=8,
        hidden_size=8,
        attention="additive",
        dropout=0.0,
        max_target_length=64,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
    )
    return hf_seq.RNNSeq2SeqForConditionalGeneration(config).eval()


def batch(padded: bool, left: bool = False) -> dict[str, torch.Tensor]:
    """Two rows of 7 ids (4..VOCAB-1); ``padded``: the second has 3 padding positions (right, or ``left``)."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(4, VOCAB, (2, 7), generator=generator)
    mask = torch.ones_like(ids)
    if padded:
        if left:
            mask[1, :3] = 0
        else:
            mask[1, 4:] = 0
    return {"input_ids": ids.masked_fill(mask == 0, PAD), "attention_mask": mask}


@pytest.fixture(scope="module")
def loop_floor() -> dict[int, float]:
    """Host reads per step of transformers' loop alone, greedy and beam 5 (see :class:`LoopOnlyLM`)."""
    torch.manual_seed(0)
    model = LoopOnlyLM(LoopOnlyConfig(pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS)).eval()
    inputs = batch(padded=False)
    return {beams: reads_per_step(model, inputs, beams) for beams in (1, 5)}


@pytest.mark.parametrize("num_beams", [1, 5])
@pytest.mark.parametrize("padded", [False, True])
def test_transformer_decoding_step_reads_no_more_than_marian_and_the_loop(num_beams, padded, loop_floor):
    torch.manual_seed(0)
    ours, marian = tiny_transformer(), tiny_marian()
    inputs = batch(padded)
    ours_reads, marian_reads = reads_per_step(ours, inputs, num_beams), reads_per_step(marian, inputs, num_beams)
    assert ours_reads <= marian_reads, (ours_reads, marian_reads)
    # nothing beyond transformers' own loop: no id check, no mask check, no attention-row check per step or layer
    assert ours_reads <= loop_floor[num_beams], (ours_reads, loop_floor)


@pytest.mark.parametrize("num_beams", [1, 5])
@pytest.mark.parametrize(
    "build,padded,left",
    [
        (tiny_rnn_lm, False, False),
        (tiny_rnn_lm, True, True),
        (tiny_rnn_seq2seq, False, False),
        (tiny_rnn_seq2seq, True, False),
    ],
)
def test_recurrent_decoding_step_reads_no_more_than_the_loop(build, padded, left, num_beams, loop_floor):
    torch.manual_seed(0)
    model = build()
    reads = reads_per_step(model, batch(padded, left), num_beams)
    assert reads <= loop_floor[num_beams], (type(model).__name__, reads, loop_floor)


def test_the_floor_is_what_the_loop_reads():
    """The budget is not vacuous: the loop-only model reads at least once per step (the stopping check), and
    the count sees a read added to a step (one ``bool()`` per forward)."""
    torch.manual_seed(0)
    model = LoopOnlyLM(LoopOnlyConfig(pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS)).eval()
    inputs = batch(padded=False)
    floor = reads_per_step(model, inputs, 1)
    assert floor >= 1
    forward = model.forward

    def reading_forward(*args, **kwargs):
        out = forward(*args, **kwargs)
        bool(out.logits.isfinite().all())  # a value check of the kind the decoding step must not repeat
        return out

    model.forward = reading_forward
    assert reads_per_step(model, inputs, 1) == floor + 1


@pytest.mark.parametrize("build", [tiny_transformer, tiny_rnn_seq2seq])
def test_prompt_ids_are_still_checked_in_generate(build):
    """The ids a caller gives (the source, a decoder prompt) are checked by generate()'s first forward."""
    torch.manual_seed(0)
    model = build()
    inputs = batch(padded=True)
    prompt = torch.tensor([[BOS, 5], [BOS, VOCAB + 3]])
    with pytest.raises(ValueError, match="decoder_input_ids"):
        model.generate(**inputs, decoder_input_ids=prompt, max_new_tokens=4)
    bad_source = inputs["input_ids"].clone()
    bad_source[0, 1] = VOCAB
    with pytest.raises(ValueError, match="input_ids"):
        model.generate(input_ids=bad_source, attention_mask=inputs["attention_mask"], max_new_tokens=4)


def test_rnn_lm_prompt_ids_are_still_checked_in_generate():
    torch.manual_seed(0)
    model = tiny_rnn_lm()
    prompt = torch.tensor([[5, 6, VOCAB]])
    with pytest.raises(ValueError, match="input_ids"):
        model.generate(input_ids=prompt, max_new_tokens=4)


@pytest.mark.parametrize("build", [tiny_transformer, tiny_rnn_seq2seq])
def test_a_direct_forward_with_a_cache_checks_its_ids_every_call(build):
    """Outside generate() nothing is skipped: a decoding step called by hand with a cache still checks its ids."""
    torch.manual_seed(0)
    model = build()
    inputs = batch(padded=True)
    with torch.no_grad():
        first = model(**inputs, decoder_input_ids=torch.full((2, 1), BOS), use_cache=True)
        with pytest.raises(ValueError, match="decoder_input_ids"):
            model(**inputs, decoder_input_ids=torch.full((2, 1), VOCAB), cache=output_cache(first), use_cache=True)


def test_rnn_lm_direct_forward_with_a_cache_checks_its_ids_every_call():
    torch.manual_seed(0)
    model = tiny_rnn_lm()
    with torch.no_grad():
        first = model(input_ids=torch.tensor([[5, 6]]), use_cache=True)
        with pytest.raises(ValueError, match="input_ids"):
            model(input_ids=torch.tensor([[VOCAB]]), cache=output_cache(first), use_cache=True)


def manual_greedy(model, inputs: dict, steps: int) -> torch.Tensor:
    """Greedy decoding with the model's forward and its cache, without generate(): nothing remembered, nothing
    skipped (every step checks its ids and masks)."""
    encoder_decoder = model.config.is_encoder_decoder
    if encoder_decoder:
        tokens = torch.full((inputs["input_ids"].shape[0], 1), BOS)
        out = model(**inputs, decoder_input_ids=tokens, use_cache=True)
    else:
        tokens, mask = inputs["input_ids"], inputs["attention_mask"]
        out = model(input_ids=tokens, attention_mask=mask, use_cache=True)
    for step in range(steps):
        next_token = out.logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
        tokens = torch.cat([tokens, next_token], 1)
        if step == steps - 1:
            break
        if encoder_decoder:
            out = model(**inputs, decoder_input_ids=next_token, cache=output_cache(out), use_cache=True)
        else:
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], 1)
            out = model(input_ids=next_token, attention_mask=mask, cache=output_cache(out), use_cache=True)
    return tokens


@pytest.mark.parametrize("build,left", [(tiny_transformer, False), (tiny_rnn_seq2seq, False), (tiny_rnn_lm, True)])
def test_generate_without_the_per_step_reads_decodes_as_the_checked_forward(build, left):
    """The steps that skip their reads inside generate() give exactly the tokens of a hand-written loop whose
    every step checks ids and masks (a padded batch: the remembered masks are in play)."""
    torch.manual_seed(0)
    model = build()
    inputs = batch(padded=True, left=left)
    with torch.no_grad():
        expected = manual_greedy(model, inputs, steps=12)
        got = model.generate(**inputs, do_sample=False, num_beams=1, max_new_tokens=12, min_new_tokens=12)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_generate_with_a_user_stopping_criterion_checks_every_step():
    """A user's logits processors or stopping criteria may run the model themselves: then no id is trusted and
    every step is checked (one more read per step than the plain call)."""
    from transformers import StoppingCriteria, StoppingCriteriaList

    class Never(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            return torch.zeros(input_ids.shape[0], dtype=torch.bool)

    torch.manual_seed(0)
    model = tiny_transformer()
    inputs = batch(padded=False)
    plain = reads_per_step(model, inputs, 1)
    with_criterion = reads_per_step(model, {**inputs, "stopping_criteria": StoppingCriteriaList([Never()])}, 1)
    assert with_criterion > plain


def test_remembered_values_follow_in_place_edits():
    """A remembered value is recomputed after the tensor is modified in place (its version counter moves)."""
    steps = fast_paths.GenerationSteps(model=None, decoder=None, trusts_ids=True)
    mask = torch.ones(2, 3, dtype=torch.long)
    calls = []

    def compute():
        calls.append(1)
        return bool(mask.all())

    nothing = []
    with fast_paths.generation_steps(steps):
        assert fast_paths.remembered(mask, "none", lambda: nothing.append(1)) is None  # a remembered None counts
        assert fast_paths.remembered(mask, "none", lambda: nothing.append(1)) is None
        assert nothing == [1]
        assert fast_paths.remembered(mask, "all", compute) is True
        assert fast_paths.remembered(mask, "all", compute) is True
        assert len(calls) == 1
        mask[1, 2] = 0
        assert fast_paths.remembered(mask, "all", compute) is False
        assert len(calls) == 2
    assert fast_paths.current_generation_steps() is None


# ------------------------------------------------------------------- the accelerator path, checked on CPU


@pytest.mark.parametrize("num_beams", [1, 5])
@pytest.mark.parametrize("build", [tiny_transformer, tiny_rnn_seq2seq, tiny_rnn_lm])
def test_accelerator_path_decoding_step_reads_no_more_than_the_loop(build, num_beams, loop_floor):
    """Every CPU fast path off and the value checks off (``fast_paths.disabled()``, ``value_checks_disabled()``: the
    code an accelerator runs eagerly), a padded batch: the decoding step reads nothing on the host, whatever
    ``generate()`` knows or not."""
    torch.manual_seed(0)
    model = build()
    with fast_paths.disabled(), value_checks_disabled():
        reads = reads_per_step(model, batch(padded=True, left=build is tiny_rnn_lm), num_beams)
    assert reads <= loop_floor[num_beams], (type(model).__name__, reads, loop_floor)


def decoding_step_inputs(model) -> tuple[dict, object]:
    """(inputs of one cached decoding step of a padded batch, the cache of the prefix before it)."""
    encoder_decoder = model.config.is_encoder_decoder
    inputs = batch(padded=True, left=not encoder_decoder)
    with torch.no_grad():
        if encoder_decoder:
            prefix = model(**inputs, decoder_input_ids=torch.tensor([[BOS, 5], [BOS, 6]]), use_cache=True)
            step = {**inputs, "decoder_input_ids": torch.tensor([[7], [8]])}
        else:
            prefix = model(**inputs, use_cache=True)
            mask = torch.cat([inputs["attention_mask"], torch.ones(2, 1, dtype=torch.long)], 1)
            step = {"input_ids": torch.tensor([[7], [8]]), "attention_mask": mask}
    return step, output_cache(prefix)


@pytest.mark.parametrize("build", [tiny_transformer, tiny_rnn_seq2seq, tiny_rnn_lm])
def test_decoding_step_compiles_with_fullgraph_and_equals_eager(build):
    """The cached decoding step compiles with ``fullgraph=True`` (no host read, no graph break in the traced path)
    and gives the eager logits and the same next step."""
    import copy

    torch.manual_seed(0)
    model = build()
    step, cache = decoding_step_inputs(model)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    with torch.no_grad():
        eager = model(**step, cache=copy.deepcopy(cache), use_cache=True)
        got = compiled(**step, cache=copy.deepcopy(cache), use_cache=True)
    torch._dynamo.reset()
    torch.testing.assert_close(got.logits, eager.logits, rtol=1e-5, atol=1e-6)
    assert output_cache(got).get_seq_length() == output_cache(eager).get_seq_length()


@pytest.mark.slow
@pytest.mark.parametrize("build", [tiny_transformer, tiny_rnn_seq2seq, tiny_rnn_lm])
def test_generate_with_the_forward_compiled_fullgraph_gives_the_eager_tokens(build):
    """``model.forward = torch.compile(model.forward, fullgraph=True)``, then ``generate()``: every step (prompt
    and decoding) traces without a graph break inside generate()'s bookkeeping and decodes as eager."""
    torch.manual_seed(0)
    model = build()
    inputs = batch(padded=True, left=build is tiny_rnn_lm)
    settings = dict(do_sample=False, num_beams=1, max_new_tokens=6, min_new_tokens=6)
    torch._dynamo.reset()
    with torch.no_grad():
        expected = model.generate(**inputs, **settings)
        model.forward = torch.compile(model.forward, fullgraph=True, backend="eager")
        got = model.generate(**inputs, **settings)
    torch._dynamo.reset()
    assert torch.equal(got, expected), (got, expected)
