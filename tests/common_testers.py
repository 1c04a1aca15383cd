"""What every hf_seq tester adds to transformers' ``ModelTesterMixin`` (tests/transformers_common): one override.

transformers' common tests decide what a head is (which labels to make, which class is the base model, which heads
shift their labels) from its class-name tables (``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` and the like, keyed by
``model_type``). A plugin registers its heads with ``AutoModel*.register``, which fills the Auto classes but not those
name tables, so for the duration of each test :class:`HfSeqTesterMixin` adds hf_seq's registrations to them — what the
tables would hold if hf_seq were part of transformers. Nothing else about a test changes.
"""

from __future__ import annotations

from unittest import mock

import transformers
from tiny_models import registered_heads


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
