"""transformers' common model tests (ModelTesterMixin, ConfigTester) vendored from its 5.24.0 source distribution.

See PROVENANCE.md. This file must stay free of imports: test_configuration_common.py executes it (through
``direct_transformers_import``) as it executes ``tests/__init__.py`` in the transformers repository.
"""
