"""The `evorag` command line: `evorag_core.cli.main.main` dispatches to one module per subcommand (shared option
helpers in `common`). The only library package that may import `training` and `app`. Nothing is imported here, so
that `python -m evorag_core.cli.main` runs that module once (no runpy warning about it being imported already)."""
