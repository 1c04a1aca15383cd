"""Former home of hf_seq's ``nn.Linear`` subclass; kept only so that modules still importing these names load.

Every projection of the hf_seq models is a plain ``torch.nn.Linear``: ``quantize_dynamic`` matches module classes
exactly, and adapters, hooks, ``torch.compile`` and export expect torch's own class. The former subclass multiplied
small CPU decoding inputs by an input-major copy of its weight inside ``generate()``; measured against the plain
layer in one process it gained about 4 % on greedy Transformer decoding and nothing on beam search or on the RNN
seq2seq decoder (``docs/compile.md``), so it was removed.

* ``Linear`` is ``nn.Linear`` itself (not a subclass), so existing ``Linear(...)`` calls build plain layers.
* ``InputMajorDecodingMixin`` adds nothing to a model class; drop it from the class bases.
"""

from __future__ import annotations

from torch import nn

Linear = nn.Linear


class InputMajorDecodingMixin:
    """Adds nothing (the input-major decoding copy was removed); remove it from the class bases."""


__all__ = ["InputMajorDecodingMixin", "Linear"]
