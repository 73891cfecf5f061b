"""``python -m llmrt.actors.app.cli``: the ``llmrt`` command (the console script's `console`)."""

import sys

from . import console

sys.exit(console())
