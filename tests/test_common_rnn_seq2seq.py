"""transformers' common model and generation tests over the hf_seq RNN encoder-decoder (in the style of transformers'
test_modeling_marian.py, with a recurrent decoder state as the cache)."""

from __future__ import annotations

import unittest

import torch
from common_testers import HfSeqTesterMixin
from transformers.testing_utils import torch_device
from transformers_common.generation.test_utils import GenerationTesterMixin
from transformers_common.test_configuration_common import ConfigTester
from transformers_common.test_modeling_common import ModelTesterMixin, ids_tensor

from hf_seq import HfSeqRNNSeq2SeqConfig, RNNSeq2SeqForConditionalGeneration, RNNSeq2SeqModel


class RNNSeq2SeqModelTester:
    def __init__(
        self,
        parent,
        batch_size=13,
        seq_length=7,
        is_training=True,
        vocab_size=99,
        embedding_size=16,
        hidden_size=16,
        num_hidden_layers=2,
        cell="lstm",
        bidirectional=True,
        attention="additive",
        dropout=0.1,
        uniform_init_range=0.5,
        eos_token_id=2,
        pad_token_id=1,
        bos_token_id=0,
        decoder_start_token_id=3,
    ):
        self.parent = parent
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.is_training = is_training
        self.vocab_size = vocab_size
        self.embedding_size = embedding_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.cell = cell
        self.bidirectional = bidirectional
        self.attention = attention
        self.dropout = dropout
        self.uniform_init_range = uniform_init_range
        self.eos_token_id = eos_token_id
        self.pad_token_id = pad_token_id
        self.bos_token_id = bos_token_id
        self.decoder_start_token_id = decoder_start_token_id

    def prepare_config_and_inputs(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length - 1], self.vocab_size).clamp(3)
        eos = torch.full((self.batch_size, 1), self.eos_token_id, dtype=torch.long, device=torch_device)
        input_ids = torch.cat([input_ids, eos], dim=1)
        attention_mask = torch.ones_like(input_ids)
        attention_mask[0, -2:] = 0  # one right-padded source row
        decoder_input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(3)
        inputs = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "decoder_input_ids": decoder_input_ids,
            "decoder_attention_mask": torch.ones_like(decoder_input_ids),
        }
        return self.get_config(), inputs

    def get_config(self):
        return HfSeqRNNSeq2SeqConfig(
            vocab_size=self.vocab_size,
            embedding_size=self.embedding_size,
            hidden_size=self.hidden_size,
            encoder_layers=self.num_hidden_layers,
            decoder_layers=self.num_hidden_layers,
            cell=self.cell,
            bidirectional=self.bidirectional,
            attention=self.attention,
            dropout=self.dropout,
            uniform_init_range=self.uniform_init_range,  # the default 0.1 gives logits within 1e-4 of each other: argmax is noise
            eos_token_id=self.eos_token_id,
            bos_token_id=self.bos_token_id,
            pad_token_id=self.pad_token_id,
            decoder_start_token_id=self.decoder_start_token_id,
        )

    def prepare_config_and_inputs_for_common(self):
        return self.prepare_config_and_inputs()

    def create_and_check_decoder_model_past_large_inputs(self, config, inputs_dict):
        model = RNNSeq2SeqModel(config).to(torch_device).eval()
        input_ids = inputs_dict["input_ids"][:2]
        decoder_input_ids = inputs_dict["decoder_input_ids"][:2]
        with torch.no_grad():
            outputs = model(input_ids=input_ids, decoder_input_ids=decoder_input_ids, use_cache=True)
            next_tokens = ids_tensor((2, 3), config.vocab_size).clamp(3)
            next_ids = torch.cat([decoder_input_ids, next_tokens], dim=-1)
            from_scratch = model(input_ids=input_ids, decoder_input_ids=next_ids, use_cache=False)
            from_cache = model(input_ids=input_ids, decoder_input_ids=next_tokens, cache=outputs.cache, use_cache=True)
        # the last three positions computed from the recurrent state equal those computed from scratch
        self.parent.assertEqual(from_cache.last_hidden_state.shape[1], next_tokens.shape[1])
        torch.testing.assert_close(
            from_cache.last_hidden_state, from_scratch.last_hidden_state[:, -3:], rtol=1e-3, atol=1e-3
        )


class RNNSeq2SeqModelTest(HfSeqTesterMixin, ModelTesterMixin, GenerationTesterMixin, unittest.TestCase):
    all_model_classes = (RNNSeq2SeqModel, RNNSeq2SeqForConditionalGeneration)
    is_encoder_decoder = True
    # override: no self-attention layers; the mixin's per-layer (heads, query, key) attention checks do not apply.
    # output_attentions (the decoder's attention over the source) is checked in test_contract.py
    has_attentions = False

    def setUp(self):
        super().setUp()
        self.model_tester = RNNSeq2SeqModelTester(self)
        # override: no attention heads in a recurrent model (as transformers' Mamba tests); the other common properties stay
        self.config_tester = ConfigTester(
            self, config_class=HfSeqRNNSeq2SeqConfig, common_properties=["hidden_size", "num_hidden_layers"]
        )

    def test_config(self):
        self.config_tester.run_common_tests()

    def test_decoder_model_past_with_large_inputs(self):
        self.model_tester.create_and_check_decoder_model_past_large_inputs(
            *self.model_tester.prepare_config_and_inputs()
        )
