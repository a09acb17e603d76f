"""The `evorag` command line: `main` dispatches to one module per subcommand (shared option helpers in `common`).
The only library package that may import `training` and `app`."""
from evorag_core.cli.main import main

__all__ = ["main"]
