"""The application on top of the actors: ``llmrt.toml`` configuration and the CLI.

Nothing in the runtime imports this package; it learns about adapters only
through the ``llmrt.adapters`` entry-point group (`llmrt.actors.app.plugins`).
"""
