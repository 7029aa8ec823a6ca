"""`python -m loadlab.cli` = the `loadlab` command."""

from loadlab.cli import main

main()
