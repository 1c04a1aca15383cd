"""What every hf_seq tester adds to transformers' ``ModelTesterMixin`` (tests/transformers_common): three overrides.

transformers' common tests decide what a head is (which labels to make, which class is the base model, which heads
shift their labels) from its class-name tables (``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` and the like, keyed by
``model_type``). A plugin registers its heads with ``AutoModel*.register``, which fills the Auto classes but not those
name tables, so for the duration of each test :class:`HfSeqTesterMixin` adds hf_seq's registrations to them — what the
tables would hold if hf_seq were part of transformers. Two tests check a behaviour hf_seq deliberately differs in;
their overrides check hf_seq's behaviour instead (each says why).
"""

from __future__ import annotations

import os
import tempfile
from unittest import mock

import pytest
import torch
import transformers
from compat_envs import VENDORED_RELEASE
from safetensors.torch import save_file
from tiny_models import registered_heads

import hf_seq.losses

# tests/transformers_common imports helpers of its own release's transformers.testing_utils: on another release the
# test_common_* modules are skipped, with this reason, instead of failing to import.
if transformers.__version__ != VENDORED_RELEASE:
    pytest.skip(
        f"transformers' common tests (tests/transformers_common) are those of transformers {VENDORED_RELEASE}, and "
        f"{transformers.__version__} is installed: `make test` installs {VENDORED_RELEASE}",
        allow_module_level=True,
    )


class HfSeqTesterMixin:
    """Mixed in before ``ModelTesterMixin``: puts hf_seq's Auto registrations into transformers' name tables."""

    def setUp(self):
        super().setUp()
        additions: dict[int, tuple[dict, dict]] = {}
        for auto_name, model_cls in registered_heads():
            # override: a plugin's heads are missing from the class-name tables the mixin reads (module docstring)
            names = getattr(transformers, auto_name)._model_mapping._model_mapping  # model_type -> class name
            additions.setdefault(id(names), (names, {}))[1][model_cls.config_class.model_type] = model_cls.__name__
        for names, extra in additions.values():
            patcher = mock.patch.dict(names, extra)
            patcher.start()
            self.addCleanup(patcher.stop)

    def test_model_weights_reload_no_missing_tied_weights(self):
        # override: the mixin loads a checkpoint none of whose tensors fit the model and expects a random model with
        # every weight reported missing; hf_seq makes that a clear error instead (tests/test_loading_errors.py)
        for model_class in self.all_model_classes:
            config, _ = self.model_tester.prepare_config_and_inputs_for_common()
            with tempfile.TemporaryDirectory() as folder:
                model_class(config).save_pretrained(folder)
                save_file({"tensor": torch.tensor([1, 2])}, os.path.join(folder, "model.safetensors"), {"format": "pt"})
                with self.assertRaisesRegex(ValueError, f"model_type '{config.model_type}'"):
                    model_class.from_pretrained(folder)

    def test_encoder_decoder_loss_no_double_shift(self):
        # override: eager CPU training fuses the output projection with the loss (its value equals the cross-entropy
        # of the returned logits, tests/test_losses.py), so autograd has no edge from the loss to `logits`; the
        # mixin's gradient oracle runs on the static path that compiled and accelerator runs take
        with hf_seq.fast_paths.disabled():
            super().test_encoder_decoder_loss_no_double_shift()
