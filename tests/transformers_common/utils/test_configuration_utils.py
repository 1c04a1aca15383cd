"""``config_common_kwargs`` for ``ConfigTester.check_config_arguments_init``; NOT part of the transformers 5.25.0 sdist.

transformers' ``tests/utils/test_configuration_utils.py`` is not shipped in the sdist. This dict is written here from
the common fields of ``transformers.PreTrainedConfig`` (``configuration_utils.py``, the same fields in 5.24 and 5.25): every one set to a value
other than its default, so that a config class that drops or overrides one of them is caught. ``is_encoder_decoder``
is left out: it is fixed by the family (hf_seq's encoder-decoder configs reject False, the others are never
encoder-decoders), not a user setting.
"""

config_common_kwargs = {
    "return_dict": False,
    "output_hidden_states": True,
    "output_attentions": True,
    "dtype": "float16",
    "chunk_size_feed_forward": 5,
    "architectures": ["BertModel"],
    "id2label": {0: "label"},
    "label2id": {"label": "0"},
    "problem_type": "regression",
}
