"""Base class that ``ModelTesterMixin`` derives from; NOT part of the transformers 5.25.0 source distribution.

transformers' ``tests/exporters/test_export.py`` is not shipped in the sdist. hf_seq checks ``torch.export.export`` and
``torch.onnx.export(..., dynamo=True)`` of every registered head in ``tests/test_contract.py`` instead, so this base
adds no tests of its own.
"""


class ExportTesterMixin:
    """Export tests of every hf_seq head live in tests/test_contract.py (see the module docstring)."""
