"""``python -m profattn``: the command line (the same as the ``profattn`` script)."""

from profattn.cli import main

main()
