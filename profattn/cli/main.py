"""The ``profattn`` command line (click): the group, its error handling and the path helpers the commands
share. The commands live one module per group: :mod:`profattn.cli.measure` (``profile``, ``sweep``,
``counters``), :mod:`profattn.cli.inspect` (``report``, ``analyze``, ``summary``, ``backends``) and
:mod:`profattn.cli.review` (``compare``); :mod:`profattn.cli` imports them all so :func:`main` has every
command.

Bad input — an unknown name, a missing or malformed results file or trace — prints one line and exits
with code 2; no traceback. What was read past (:class:`~profattn.errors.ProfattnWarning`: unknown fields ignored,
unpaired surrogates replaced) prints one ``warning: ...`` line each on stderr. ``compare`` exits 1 when it finds a regression beyond its threshold.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import warnings
from collections.abc import Iterable
from pathlib import Path

import click

from profattn.errors import ProfattnError, ProfattnWarning, message_text
from profattn.files import check_output, resolve_path

REGIMES = ("train", "prefill", "decode", "mixed", "all")


def repeated_option(group: click.Group, argv: list[str]) -> str | None:
    """Why ``argv`` is refused for an option given twice, or None. Click keeps the last value of an option that
    takes one (``--gpu A --gpu B`` silently means B); profattn refuses it instead, for every command. An option
    declared ``multiple`` (``--backend``) or counted may repeat; a flag repeated in the same spelling
    (``--json --json``) means what it says once, but its two spellings together (``--search --no-search``) are refused;
    an option's value is never read as an option (``--out --out`` names a file); with ``--help`` click shows the help."""
    cmd: click.Command = group
    rest = list(argv)
    while isinstance(cmd, click.Group) and rest and not rest[0].startswith("-"):
        sub = cmd.get_command(click.Context(cmd), rest[0])
        if sub is None:
            return None  # click says what is wrong with an unknown command
        cmd, rest = sub, rest[1:]
    options: dict[str, click.Option] = {}
    for param in cmd.params:
        if isinstance(param, click.Option):
            for name in (*param.opts, *param.secondary_opts):
                options[name] = param
    help_names = set(cmd.get_help_option_names(click.Context(cmd)))
    if help_names & set(rest[:rest.index("--")] if "--" in rest else rest):
        return None  # click shows the help, whatever else is on the line
    spelled: dict[int, list[str]] = {}
    i = 0
    while i < len(rest):
        token = rest[i]
        i += 1
        if token == "--":
            break
        name, eq, _ = token.partition("=") if token.startswith("--") else (token, "", "")
        param = options.get(name)
        if param is None:
            continue
        takes_value = not (param.is_flag or param.count)
        if takes_value and not eq:
            i += max(param.nargs, 1)  # its value(s), whatever they look like
        if param.multiple or param.count:
            continue
        seen = spelled.setdefault(id(param), [])
        if seen and (takes_value or name not in seen):
            return f"option {param.opts[0]} given more than once; give it once"
        seen.append(name)
    return None


class _Group(click.Group):
    """Turns usage errors and :class:`ProfattnError` into one line ``profattn: error: ...`` and exit code 2."""

    def main(self, *args, **kwargs):  # type: ignore[override]
        kwargs["standalone_mode"] = False
        with warnings.catch_warnings():
            warnings.simplefilter("always", ProfattnWarning)
            shown = warnings.showwarning

            def show(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001 - warnings' signature
                if issubclass(category, ProfattnWarning):
                    click.echo(f"warning: {message_text(message)}", err=True)  # what was read past: one line each
                else:
                    shown(message, category, filename, lineno, file, line)

            warnings.showwarning = show
            self._main(*args, **kwargs)

    def _main(self, *args, **kwargs):  # noqa: ANN002, ANN003 - click's
        argv = kwargs.get("args", args[0] if args else None)
        repeated = repeated_option(self, list(sys.argv[1:] if argv is None else argv))
        if repeated:
            click.echo(f"profattn: error: {message_text(repeated)} (see 'profattn --help')", err=True)
            sys.exit(2)
        try:
            rv = super().main(*args, **kwargs)
        except click.exceptions.NoArgsIsHelpError as exc:
            click.echo(exc.ctx.get_help() if exc.ctx else self.get_help(click.Context(self)))
            sys.exit(0)
        except click.UsageError as exc:
            click.echo(f"profattn: error: {message_text(exc.format_message())} (see 'profattn --help')", err=True)
            sys.exit(2)
        except ProfattnError as exc:
            click.echo(f"profattn: error: {message_text(exc)}", err=True)
            sys.exit(exc.exit_code)
        except sqlite3.DatabaseError as exc:  # a results store damaged after it was opened (a table dropped, a bad page)
            click.echo(f"profattn: error: the results store could not be read ({message_text(exc)}): a damaged file; "
                       "`profattn db import` the runs into a new --db", err=True)
            sys.exit(2)
        except click.ClickException as exc:
            click.echo(f"profattn: error: {message_text(exc.format_message())}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("profattn: aborted", err=True)
            sys.exit(130)
        except ModuleNotFoundError as exc:  # a dependency missing from this environment (an install without pip's deps)
            if exc.name is None or exc.name.split(".")[0] == "profattn":
                raise
            top = exc.name.split(".")[0]
            click.echo(f"profattn: error: this command needs the Python package {top!r}, which is not installed "
                       f"(`pip install {top}`, or install profattn with its dependencies)", err=True)
            sys.exit(2)
        except OSError as exc:  # the file system refused: unwritable --out, full disk, ...
            where = f": {exc.filename}" if getattr(exc, "filename", None) else ""
            click.echo(f"profattn: error: {message_text(exc.strerror or exc)}{message_text(where)}", err=True)
            sys.exit(2)
        sys.exit(rv if isinstance(rv, int) else 0)


def output_file(raw: str | os.PathLike[str], option: str = "--out", *, default_name: str | None = None,
                inputs: Iterable[str | os.PathLike[str]] = (), own_report_of: Path | None = None) -> Path:
    """Validate an output file path before anything is read or written and return it.

    With ``default_name``, an existing directory or a path ending in ``/`` means ``<dir>/<default_name>``;
    without it, a directory is refused. Parents need not exist (they are created on writing), but none of
    them may be a file or a directory files cannot be created in. The path may not be one of ``inputs``
    (the files the command reads), a run's report.html or results.json (unless ``own_report_of`` is that
    run: ``profattn report RUN``), or an existing file profattn did not write
    (:func:`profattn.files.check_output`).

    Raises:
        ProfattnError: an empty path, a directory (without ``default_name``), or any refusal above.
    """
    text = os.fspath(raw)
    if not text.strip():
        raise ProfattnError(f"{option} must name a file")
    path = Path(text)
    if default_name is not None and (text.endswith(("/", os.sep)) or path.is_dir()):
        path = path / default_name
    elif path.is_dir():
        raise ProfattnError(f"{option} {path} is a directory")
    check_output(path, option, inputs=inputs, own_report_of=own_report_of)
    return path


def distinct_outputs(*named: tuple[str, Path | None]) -> None:
    """Raise :class:`ProfattnError` when two of the ``(option, path)`` outputs of one command are the same file."""
    seen: dict[Path, str] = {}
    for option, path in named:
        if path is None:
            continue
        key = resolve_path(path, option)
        if key in seen:
            raise ProfattnError(f"{option} {path} is also {seen[key]}; choose another path")
        seen[key] = option


def run_inputs(path: str | os.PathLike[str]) -> list[Path]:
    """The inputs (for :func:`output_file`) of a command that reads the run at ``path`` (a run directory or
    its results.json): the results.json and, when it is one, the run directory (its traces)."""
    path = Path(path)
    root = path if path.is_dir() else path.parent
    files = [path, root / "results.json"]
    if (root / "results.json").is_file():
        files.append(root)
    return files


def check_device_name(name: str | None) -> None:
    """Refuse a ``--device NAME`` that is not cuda, cuda:N or cpu, without importing torch: a command calls it
    before its heavy imports so that a typo is one line at once (:func:`resolve_device` checks the rest).

    Raises:
        ProfattnError: not cuda, cuda:N or cpu.
    """
    if name is not None and name not in ("cuda", "cpu") and not name.startswith("cuda:"):
        raise ProfattnError(f"unknown device {name!r}; valid: cuda, cuda:N, cpu")


def resolve_device(name: str | None):
    """The ``torch.device`` that ``--device NAME`` names (None: cuda when available, else cpu).

    Raises:
        ProfattnError: not cuda, cuda:N or cpu; CUDA asked for but absent; an index past the device count.
    """
    check_device_name(name)  # before torch's 2-s import
    import torch

    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise ProfattnError(f"invalid device {name!r}; valid: cuda, cuda:N, cpu") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ProfattnError(f"--device {name} was asked for, but torch sees no CUDA device here (use --device cpu)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ProfattnError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device


def read_run(path: Path, keep_host_info: bool):
    """The run in ``path`` (a run directory or its results.json), scrubbed of host information unless
    ``keep_host_info``.

    Raises:
        ProfattnError: no results file, or one that cannot be read.
    """
    from profattn.results import read_results

    run = read_results(path)
    if keep_host_info:
        return run
    from profattn.privacy import scrub

    return scrub(run)


@click.group(cls=_Group, no_args_is_help=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="profattn")
def main() -> None:
    """profattn: for this attention workload, which kernel wins, and why?"""
