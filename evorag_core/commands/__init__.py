"""One module per `evorag` subcommand; shared option helpers in `common`."""
