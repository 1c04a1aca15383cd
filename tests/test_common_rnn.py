"""transformers' common model and generation tests over the hf_seq RNN family (in the style of transformers'
test_modeling_mamba.py: a recurrent state as the cache, no attention layers)."""

from __future__ import annotations

import unittest

import torch
from common_testers import HfSeqTesterMixin
from transformers.testing_utils import torch_device
from transformers_common.generation.test_utils import GenerationTesterMixin
from transformers_common.test_configuration_common import ConfigTester
from transformers_common.test_modeling_common import ModelTesterMixin, ids_tensor

from hf_seq import HfSeqRNNConfig, RNNForCausalLM, RNNForSequenceClassification, RNNForTokenClassification, RNNModel


class RNNModelTester:
    def __init__(
        self,
        parent,
        batch_size=13,
        seq_length=7,
        is_training=True,
        use_labels=True,
        vocab_size=99,
        embedding_size=32,
        hidden_size=32,
        num_hidden_layers=2,
        cell="lstm",
        dropout=0.1,
        initializer_range=0.5,
        num_labels=3,
        type_sequence_label_size=2,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    ):
        self.parent = parent
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.is_training = is_training
        self.use_labels = use_labels
        self.vocab_size = vocab_size
        self.embedding_size = embedding_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.cell = cell
        self.dropout = dropout
        self.initializer_range = initializer_range
        self.num_labels = num_labels
        self.type_sequence_label_size = type_sequence_label_size
        self.pad_token_id = pad_token_id
        self.bos_token_id = bos_token_id
        self.eos_token_id = eos_token_id

    def prepare_config_and_inputs(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(3)
        attention_mask = torch.ones_like(input_ids)
        input_ids[0, :2] = self.pad_token_id  # one left-padded row (how generate() pads prompts)
        attention_mask[0, :2] = 0
        sequence_labels = token_labels = None
        if self.use_labels:
            sequence_labels = ids_tensor([self.batch_size], self.type_sequence_label_size)
            token_labels = ids_tensor([self.batch_size, self.seq_length], self.num_labels)
        return self.get_config(), input_ids, attention_mask, sequence_labels, token_labels

    def get_config(self):
        return HfSeqRNNConfig(
            vocab_size=self.vocab_size,
            embedding_size=self.embedding_size,  # = hidden_size: the mixin expects hidden_states[0] hidden_size wide
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_hidden_layers,
            cell=self.cell,
            dropout=self.dropout,
            initializer_range=self.initializer_range,  # 0.5, not 0.1: log-probs 1e-3 apart make argmax noise
            pad_token_id=self.pad_token_id,
            bos_token_id=self.bos_token_id,
            eos_token_id=self.eos_token_id,
        )

    def prepare_config_and_inputs_for_common(self):
        config, input_ids, attention_mask, *_ = self.prepare_config_and_inputs()
        return config, {"input_ids": input_ids, "attention_mask": attention_mask}

    def create_and_check_rnn_model(self, config, input_ids, attention_mask, *_):
        model = RNNModel(config).to(torch_device).eval()
        result = model(input_ids, attention_mask=attention_mask)
        self.parent.assertEqual(result.last_hidden_state.shape, (self.batch_size, self.seq_length, self.hidden_size))
        self.parent.assertEqual(len(result.final_state), 2)  # (h, c) of the LSTM

    def create_and_check_causal_lm(self, config, input_ids, attention_mask, *_):
        model = RNNForCausalLM(config).to(torch_device).eval()
        result = model(input_ids, attention_mask=attention_mask, labels=input_ids)
        self.parent.assertEqual(result.loss.shape, ())
        self.parent.assertEqual(result.logits.shape, (self.batch_size, self.seq_length, self.vocab_size))

    def create_and_check_state_equivalence(self, config, input_ids, attention_mask, *_):
        """Logits of the last tokens read from the returned cache equal those of one forward over everything."""
        model = RNNForCausalLM(config).to(torch_device).eval()
        ids = input_ids[1:]  # rows without padding
        with torch.no_grad():
            whole = model(ids, use_cache=False).logits
            first = model(ids[:, :-2], use_cache=True)
            rest = model(ids[:, -2:], cache=first.cache, use_cache=True).logits
        torch.testing.assert_close(rest, whole[:, -2:], rtol=1e-4, atol=1e-5)

    def create_and_check_for_sequence_classification(self, config, input_ids, attention_mask, sequence_labels, _):
        config.num_labels = self.num_labels
        model = RNNForSequenceClassification(config).to(torch_device).eval()
        result = model(input_ids, attention_mask=attention_mask, labels=sequence_labels)
        self.parent.assertEqual(result.logits.shape, (self.batch_size, self.num_labels))

    def create_and_check_for_token_classification(self, config, input_ids, attention_mask, _, token_labels):
        config.num_labels = self.num_labels
        model = RNNForTokenClassification(config).to(torch_device).eval()
        result = model(input_ids, attention_mask=attention_mask, labels=token_labels)
        self.parent.assertEqual(result.logits.shape, (self.batch_size, self.seq_length, self.num_labels))


class RNNModelTest(HfSeqTesterMixin, ModelTesterMixin, GenerationTesterMixin, unittest.TestCase):
    all_model_classes = (RNNModel, RNNForCausalLM, RNNForSequenceClassification, RNNForTokenClassification)
    has_attentions = False  # as transformers' Mamba tests: a recurrent stack has no attention layers

    def setUp(self):
        super().setUp()
        self.model_tester = RNNModelTester(self)
        # override: no attention heads in a recurrent model (as transformers' Mamba tests); the other common properties stay
        self.config_tester = ConfigTester(
            self, config_class=HfSeqRNNConfig, common_properties=["hidden_size", "num_hidden_layers"]
        )

    def test_config(self):
        self.config_tester.run_common_tests()

    def test_rnn_model(self):
        self.model_tester.create_and_check_rnn_model(*self.model_tester.prepare_config_and_inputs())

    def test_causal_lm(self):
        self.model_tester.create_and_check_causal_lm(*self.model_tester.prepare_config_and_inputs())

    def test_state_equivalence(self):
        self.model_tester.create_and_check_state_equivalence(*self.model_tester.prepare_config_and_inputs())

    def test_for_sequence_classification(self):
        self.model_tester.create_and_check_for_sequence_classification(*self.model_tester.prepare_config_and_inputs())

    def test_for_token_classification(self):
        self.model_tester.create_and_check_for_token_classification(*self.model_tester.prepare_config_and_inputs())
