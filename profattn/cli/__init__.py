"""The ``profattn`` command line (click): one module per command group (see :mod:`profattn.cli.main`)."""

from profattn.cli import inspect, measure, recommend, review, simulate  # noqa: F401 - registers the commands on main
from profattn.cli.main import main

__all__ = ["main"]
