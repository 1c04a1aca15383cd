"""``python -m hf_seq.train_scripts <task> [recipe.json] [--field value ...]`` (see :mod:`hf_seq.train_scripts.cli`)."""

from hf_seq.train_scripts.cli import main

raise SystemExit(main())
