"""The benchmark suite: ``python -m bench [suite ...] [--quick]`` runs it (see ``__main__``).

The scripts ``bench_*.py`` stay runnable on their own (``python bench/bench_http.py``)
and import their helpers as top-level modules (``_common``, ``_peers``); the runner
(``__main__``, ``_suites``, ``_figures``, ``_readme``) runs each script in its own
process and reads the JSON it writes.
"""
