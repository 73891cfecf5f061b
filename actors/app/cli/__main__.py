"""``python -m llmrt.actors.app.cli``: the ``llmrt`` command (the console script's `main`)."""

import sys

from . import main

sys.exit(main())
