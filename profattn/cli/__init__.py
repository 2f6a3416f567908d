"""The ``profattn`` command line (click): one module per command group."""

from profattn.cli.commands import main

__all__ = ["main"]
