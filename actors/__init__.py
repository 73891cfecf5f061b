"""llmrt's actors: the runtime facade, registry, registrations and calls."""
