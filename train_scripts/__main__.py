"""``python -m train_scripts <task> [recipe.json] [--field value ...]`` (see :mod:`train_scripts.cli`)."""

from train_scripts.cli import main

raise SystemExit(main())
