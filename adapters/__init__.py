"""Provider adapters. Wire formats live here and nowhere else."""
