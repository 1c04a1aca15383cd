"""hf_seq's training scripts: one script per task, one recipe schema and one argument parser for all of them.

    python train_scripts/<script>.py [recipe.json] [--field value ...]     # from a clone
    hf-seq-train <task> [recipe.json] [--field value ...]                   # after `pip install hf-seq`
    python -m hf_seq.train_scripts <task> [recipe.json] [--field value ...]

Tasks (:data:`hf_seq.train_scripts.tasks.TASKS`, the task registry): ``classifier``, ``tagger``, ``lm``, ``translation``, ``pretrain_bert``,
``finetune_bert``, ``word_vectors``. :mod:`hf_seq.train_scripts.arguments` describes the recipe schema, ``docs/training.md``
every flag.
"""
