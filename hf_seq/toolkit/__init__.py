"""hf_seq.toolkit: what trains, feeds, measures and ships the models, and never travels in a model folder.

``save_pretrained`` copies a model's modelling and configuration files and the siblings they import (the top of
``hf_seq/``) beside the weights; nothing of this subpackage is among them (``tests/test_structure_imports.py``). Here:
corpus loaders and the data folder (:mod:`.data`, :mod:`.data_install`, :mod:`.checksums`), tokenize-once caches and
the token store (:mod:`.preprocessing`), tokenizer builders (:mod:`.tokenization`), batch collators and samplers
(:mod:`.collators`, :mod:`.samplers`), word vectors (:mod:`.word_vectors`), the transformers-BERT checkpoint converter
(:mod:`.bert_conversion`), checkpoint rotation (:mod:`.checkpoints`), export and quantization (:mod:`.export`,
:mod:`.onnx_runtime`, :mod:`.quantization`), the model card and attention plots (:mod:`.model_card`,
:mod:`.visualization`), the demo page and the Space it writes (:mod:`.demo`, ``hf-seq-demo``) and the local ``evaluate``
metrics (:mod:`.metrics`).

Nothing is imported here: ``hf-seq-data`` runs :mod:`.data_install` with the standard library alone.
"""
