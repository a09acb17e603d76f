"""Benchmarks of EVO-RAG Studio: one script per measurement, each writing JSON to bench/results/.

Run a benchmark as a module from the repository root, against the installed project (`make install`):

    python -m bench.<name> --help

A script imports the project's packages (`evorag_core`, `training`, `app`) as installed, and another benchmark as
`bench.<name>`; none edits `sys.path`.
"""
