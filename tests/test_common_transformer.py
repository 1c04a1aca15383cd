"""transformers' common model and generation tests over the hf_seq Transformer (in the style of transformers'
test_modeling_marian.py)."""

from __future__ import annotations

import unittest

import torch
from common_testers import HfSeqTesterMixin
from transformers.testing_utils import torch_device
from transformers_common.generation.test_utils import GenerationTesterMixin
from transformers_common.test_configuration_common import ConfigTester
from transformers_common.test_modeling_common import ModelTesterMixin, ids_tensor

from hf_seq import HfSeqTransformerConfig, TransformerForConditionalGeneration, TransformerModel


def prepare_transformer_inputs_dict(
    config, input_ids, decoder_input_ids, attention_mask=None, decoder_attention_mask=None
):
    if attention_mask is None:
        attention_mask = input_ids.ne(config.pad_token_id)
    if decoder_attention_mask is None:
        decoder_attention_mask = decoder_input_ids.ne(config.pad_token_id)
    return {
        "input_ids": input_ids,
        "decoder_input_ids": decoder_input_ids,
        "attention_mask": attention_mask,
        "decoder_attention_mask": decoder_attention_mask,
    }


class TransformerModelTester:
    def __init__(
        self,
        parent,
        batch_size=13,
        seq_length=7,
        is_training=True,
        use_labels=False,
        vocab_size=99,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=4,
        hidden_act="gelu",
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        max_position_embeddings=20,
        eos_token_id=2,
        pad_token_id=1,
        bos_token_id=0,
        decoder_start_token_id=3,
    ):
        self.parent = parent
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.is_training = is_training
        self.use_labels = use_labels
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.eos_token_id = eos_token_id
        self.pad_token_id = pad_token_id
        self.bos_token_id = bos_token_id
        self.decoder_start_token_id = decoder_start_token_id

    def prepare_config_and_inputs(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length - 1], self.vocab_size).clamp(3)
        eos = torch.full((self.batch_size, 1), self.eos_token_id, dtype=torch.long, device=torch_device)
        input_ids = torch.cat([input_ids, eos], dim=1)
        decoder_input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size)
        config = self.get_config()
        return config, prepare_transformer_inputs_dict(config, input_ids, decoder_input_ids)

    def get_config(self):
        return HfSeqTransformerConfig(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            encoder_layers=self.num_hidden_layers,
            decoder_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            intermediate_size=self.intermediate_size,
            dropout=self.hidden_dropout_prob,
            attention_dropout=self.attention_probs_dropout_prob,
            activation_function=self.hidden_act,
            max_position_embeddings=self.max_position_embeddings,
            eos_token_id=self.eos_token_id,
            bos_token_id=self.bos_token_id,
            pad_token_id=self.pad_token_id,
            decoder_start_token_id=self.decoder_start_token_id,
        )

    def prepare_config_and_inputs_for_common(self):
        return self.prepare_config_and_inputs()

    def create_and_check_decoder_model_past_large_inputs(self, config, inputs_dict):
        full = TransformerModel(config).to(torch_device).eval()
        input_ids = inputs_dict["input_ids"]
        decoder_input_ids = inputs_dict["decoder_input_ids"][:1].clamp(3)
        with torch.no_grad():
            outputs = full(input_ids=input_ids[:1], decoder_input_ids=decoder_input_ids, use_cache=True)
            cache = outputs.cache
            next_tokens = ids_tensor((1, 3), config.vocab_size).clamp(3)
            next_ids = torch.cat([decoder_input_ids, next_tokens], dim=-1)
            from_scratch = full(input_ids=input_ids[:1], decoder_input_ids=next_ids, use_cache=False)
            from_cache = full(input_ids=input_ids[:1], decoder_input_ids=next_tokens, cache=cache, use_cache=True)
        # the last three positions computed with the cache equal those computed from scratch
        self.parent.assertEqual(from_cache.last_hidden_state.shape[1], next_tokens.shape[1])
        torch.testing.assert_close(
            from_cache.last_hidden_state, from_scratch.last_hidden_state[:, -3:], rtol=1e-3, atol=1e-3
        )


class TransformerModelTest(HfSeqTesterMixin, ModelTesterMixin, GenerationTesterMixin, unittest.TestCase):
    all_model_classes = (TransformerModel, TransformerForConditionalGeneration)
    is_encoder_decoder = True

    def setUp(self):
        super().setUp()
        self.model_tester = TransformerModelTester(self)
        self.config_tester = ConfigTester(self, config_class=HfSeqTransformerConfig)

    def test_config(self):
        self.config_tester.run_common_tests()

    def test_decoder_model_past_with_large_inputs(self):
        config_and_inputs = self.model_tester.prepare_config_and_inputs()
        self.model_tester.create_and_check_decoder_model_past_large_inputs(*config_and_inputs)
