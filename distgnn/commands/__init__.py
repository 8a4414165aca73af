"""One module per ``distgnn`` subcommand: argument parsing and printing only; work is done by the
library modules they call."""
