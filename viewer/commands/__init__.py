"""One module per ``vramscope`` subcommand, each with ``main(argv) -> int``."""
