"""The layers' import directions, read from the source with ``ast`` (module-level and function-level imports).

workload -> backends -> harness; trace -> analysis -> report -> cli. trace, analysis and report never
import torch, triton, the harness or the backends; the backends never import the report, the harness or
the cli; the results store (``store``) imports none of trace, analysis, report, cli, harness, backends, torch;
the workload imports only :mod:`profattn.errors` and itself (the paged cache may import torch);
only the cli (and ``profattn.__main__``, its entry point) imports the cli; no module imports another module's ``_private`` name; ``__init__`` files
only re-export; the module graph has no cycle. Inside analysis, every module lives in one of :data:`ROOMS`, and a
room imports only rooms below it (common -> calls -> selection -> run, simulation -> comparison): never one above, never
one of its own rank, so the rooms have no circle either. A self-test feeds the checker bad modules it must catch.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "profattn"

#: (layer, import prefixes it must never import). The arrows point one way: trace -> analysis -> report.
FORBIDDEN: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("profattn.trace", ("torch", "triton", "profattn.harness", "profattn.backends", "profattn.analysis", "profattn.report")),
    ("profattn.analysis", ("torch", "triton", "profattn.harness", "profattn.backends", "profattn.report")),
    ("profattn.report", ("torch", "triton", "profattn.harness", "profattn.backends")),
    ("profattn.backends", ("profattn.report", "profattn.harness", "profattn.cli")),
    ("profattn.store", ("torch", "triton", "profattn.harness", "profattn.backends", "profattn.trace", "profattn.analysis",
                        "profattn.report", "profattn.cli")),
)
#: Violations that work in progress on this issue removes (the analysis/report twins); each must still
#: occur (a fixed one fails :func:`test_pending_violations_still_exist` until it is deleted here).
PENDING: tuple[str, ...] = ()
#: The only analysis *functions* the report layer may import: the run analysis itself and formatters — functions
#: that turn a typed record or a name into text or the exported JSON, computing nothing the report then shows as a
#: finding. Everything else the report imports from analysis must be a type (a class: records, enums) or an
#: UPPER_CASE constant; an analysis module is never imported whole (``import profattn.analysis.x``, ``from
#: profattn.analysis import x``), so no ranking, comparison or verdict is re-derived in ``report/``.
REPORT_ANALYSIS_FUNCTIONS: dict[str, str] = {
    "analyze_run": "the one run analysis (profattn.analysis.run) every run renderer formats",
    "policy_to_dict": "the exported profattn.policy JSON of a Policy record (a format)",
    "validation_dict": "a Validation record as the exported JSON's numbers (a format)",
    "kernel_stem": "a kernel's unqualified name, the key the analyze page groups its shapes by (a name format)",
    "trace_group": "the directory part of a shown trace path (a path format)",
}
#: The analysis layer's rooms (``profattn.analysis.<room>``) and their rank, lowest first. A room may import a room of a
#: lower rank (and itself); never one of a higher rank, nor another room of its own rank (``run`` and ``simulation``
#: stand side by side). Every analysis module lives in a room (only the package ``__init__`` stands outside).
ROOMS: dict[str, int] = {
    "common": 0,  # the noise rule, statistics, kernel names: below everything
    "calls": 1,  # attention calls in any trace
    "selection": 2,  # cost models, the policy, recommendations (over stored cells and a trace's calls)
    "run": 3,  # a run's evidence and verdicts (uses the policy)
    "simulation": 3,  # a request trace served through the scheduler (uses pooled times)
    "comparison": 4,  # two runs compared (uses the verdict and noise findings)
}
#: ``python -m profattn``: the package's entry point, which only starts the command line.
CLI_ENTRY = "profattn.__main__"
#: What the workload layer may import of profattn; and its one module that may import torch.
WORKLOAD_ALLOWED = ("profattn.errors", "profattn.workload")
WORKLOAD_TORCH = "profattn.workload.paged"


@dataclass(frozen=True)
class Import:
    """One import statement's effect: ``importer`` imports module ``target`` (``names`` from it, for a
    ``from`` import), at ``line``; ``top_level`` False inside a function or class body."""

    importer: str
    target: str
    names: tuple[str, ...]
    line: int
    top_level: bool


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def package_sources(root: Path = PACKAGE) -> dict[str, tuple[str, bool]]:
    """Every module under ``root``: dotted name -> (source, is a package ``__init__``)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out[".".join(parts)] = (path.read_text(encoding="utf-8"), rel.name == "__init__")
    return out


def collect_imports(sources: Mapping[str, tuple[str, bool]]) -> list[Import]:
    """Every import of every module in ``sources`` (relative imports resolved). ``from a import b`` targets
    ``a.b`` when that is a module in ``sources``, else ``a``."""
    out: list[Import] = []
    for module, (source, is_package) in sources.items():
        tree = ast.parse(source, filename=module)
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    out.append(Import(module, alias.name, (), node.lineno, id(node) in top))
            elif isinstance(node, ast.ImportFrom):
                if node.module == "__future__":
                    continue
                base = node.module or ""
                if node.level:
                    package = module.split(".") if is_package else module.split(".")[:-1]
                    package = package[: len(package) - (node.level - 1)]
                    base = ".".join(package + ([node.module] if node.module else []))
                names = tuple(a.name for a in node.names)
                submodules = [n for n in names if f"{base}.{n}" in sources]
                for n in submodules:
                    out.append(Import(module, f"{base}.{n}", (), node.lineno, id(node) in top))
                rest = tuple(n for n in names if n not in submodules)
                if rest or not submodules:
                    out.append(Import(module, base, rest, node.lineno, id(node) in top))
    return out


def _kinds(source: str) -> dict[str, str]:
    """Top-level names of a module's source → ``"class"``, ``"function"``, ``"constant"`` (UPPER_CASE assignment),
    ``"import"`` (a name it imports) or ``"other"``."""
    out: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = "class"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = "function"
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    out[t.id] = "constant" if t.id.isupper() else "other"
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                out.setdefault((a.asname or a.name).split(".")[0], "import")
    return out


def _report_analysis_problems(imports: list[Import], sources: Mapping[str, tuple[str, bool]]) -> list[str]:
    """The report layer's imports from analysis that are neither types, constants nor
    :data:`REPORT_ANALYSIS_FUNCTIONS` (see there); a name an analysis module only re-exports is judged where it is
    defined."""
    kinds = {m: _kinds(src) for m, (src, _) in sources.items() if _within(m, "profattn.analysis")}
    origin: dict[tuple[str, str], str] = {}
    for imp in imports:  # where each name an analysis module imports comes from
        if _within(imp.importer, "profattn.analysis"):
            for n in imp.names:
                origin[(imp.importer, n)] = imp.target
    out = []
    for imp in imports:
        if not (_within(imp.importer, "profattn.report") and _within(imp.target, "profattn.analysis")):
            continue
        where = f"{imp.importer}:{imp.line}"
        if not imp.names:
            out.append(f"{where}: report imports the analysis module {imp.target} whole (import its types by name)")
            continue
        for n in imp.names:
            module, seen = imp.target, set()
            while kinds.get(module, {}).get(n) == "import" and (module, n) in origin and module not in seen:
                seen.add(module)
                module = origin[(module, n)]
            kind = kinds.get(module, {}).get(n, "other")
            if kind in ("class", "constant") or (kind == "function" and n in REPORT_ANALYSIS_FUNCTIONS):
                continue
            out.append(f"{where}: report imports the analysis {kind} {n} from {module} (only types, constants, "
                       "analyze_run and the formatters)")
    return out


def _init_problems(module: str, source: str) -> list[str]:
    """What an ``__init__`` holds besides a docstring, imports, ``__all__`` and dunder assignments."""
    problems = []
    for i, node in enumerate(ast.parse(source).body):
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if all(isinstance(t, ast.Name) and t.id.startswith("__") and t.id.endswith("__") for t in targets):
                continue
        problems.append(f"{module}:{node.lineno}: __init__ holds a {type(node).__name__} (only imports, __all__ "
                        "and a docstring belong there)")
    return problems


def find_cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a path ``[a, b, ..., a]``, or None (depth-first, deterministic)."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def analysis_room(module: str) -> str | None:
    """The analysis room of ``module`` (``profattn.analysis.run.verdict`` -> ``run``), ``""`` for a module of the
    analysis layer outside every room, None outside the analysis layer and for its package ``__init__``."""
    parts = module.split(".")
    if parts[:2] != ["profattn", "analysis"] or len(parts) == 2:
        return None
    return parts[2] if parts[2] in ROOMS else ""


def _room_problems(imports: list[Import], sources: Mapping[str, tuple[str, bool]]) -> list[str]:
    """Analysis modules outside the rooms, imports up or sideways between rooms (see :data:`ROOMS`), and a circle
    of rooms."""
    out = [f"{m}: an analysis module outside the rooms ({', '.join(ROOMS)})" for m in sources if analysis_room(m) == ""]
    rooms: dict[str, set[str]] = {}
    for imp in imports:
        a, b = analysis_room(imp.importer), analysis_room(imp.target)
        if not a or not b or a == b:
            continue
        rooms.setdefault(a, set()).add(b)
        if ROOMS[b] >= ROOMS[a]:
            how = "higher" if ROOMS[b] > ROOMS[a] else "same-rank"
            out.append(f"{imp.importer}:{imp.line}: analysis room {a} imports the {how} room {b} ({imp.target})")
    cycle = find_cycle(rooms)
    if cycle:
        out.append("analysis room cycle: " + " -> ".join(cycle))
    return out


def violations(sources: Mapping[str, tuple[str, bool]]) -> list[str]:
    """Every broken rule (see the module docstring), one line each with module and line number."""
    imports = collect_imports(sources)
    out: list[str] = []
    for imp in imports:
        where = f"{imp.importer}:{imp.line}"
        for layer, forbidden in FORBIDDEN:
            if _within(imp.importer, layer):
                for f in forbidden:
                    if _within(imp.target, f):
                        out.append(f"{where}: {layer} imports {imp.target}")
        if _within(imp.importer, "profattn.workload"):
            if _within(imp.target, "profattn") and not any(_within(imp.target, a) for a in WORKLOAD_ALLOWED):
                out.append(f"{where}: profattn.workload imports {imp.target} (only profattn.errors and itself)")
            if any(_within(imp.target, t) for t in ("torch", "triton")) and imp.importer != WORKLOAD_TORCH:
                out.append(f"{where}: profattn.workload imports {imp.target} (only {WORKLOAD_TORCH} may)")
        if (_within(imp.target, "profattn.cli") and not _within(imp.importer, "profattn.cli")
                and imp.importer != CLI_ENTRY):
            out.append(f"{where}: {imp.importer} imports the command line ({imp.target})")
        if imp.target != imp.importer:
            for name in imp.names:
                if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
                    out.append(f"{where}: imports private name {name} from {imp.target}")
    out.extend(_report_analysis_problems(imports, sources))
    out.extend(_room_problems(imports, sources))
    for module, (source, is_package) in sources.items():
        if is_package:
            out.extend(_init_problems(module, source))
    graph: dict[str, set[str]] = {m: set() for m in sources}
    for imp in imports:
        if imp.target in sources and imp.target != imp.importer:
            graph[imp.importer].add(imp.target)
    cycle = find_cycle(graph)
    if cycle:
        out.append("import cycle: " + " -> ".join(cycle))
    return out


# ---- the package ------------------------------------------------------------------------------------


def _unlined(problem: str) -> str:
    """``module:12: text`` -> ``module: text`` (to match :data:`PENDING` across edits)."""
    head, sep, rest = problem.partition(": ")
    return f"{head.rsplit(':', 1)[0]}: {rest}" if sep and head.rsplit(":", 1)[-1].isdigit() else problem


def test_package_keeps_the_layer_rules():
    sources = package_sources()
    assert {"profattn.trace.kineto", "profattn.analysis.calls.find", "profattn.report.run", "profattn.cli.main"} <= set(sources)
    assert {analysis_room(m) for m in sources} - {None} == set(ROOMS)  # every room holds modules, none stands outside
    problems = [p for p in violations(sources) if _unlined(p) not in PENDING]
    assert not problems, "\n".join(problems)


def test_pending_violations_still_exist():
    found = {_unlined(p) for p in violations(package_sources())}
    fixed = [p for p in PENDING if p not in found]
    assert not fixed, "fixed, delete from PENDING: " + "; ".join(fixed)


def test_trace_analysis_report_import_without_torch():
    """Importing every module of trace, analysis and report (and the API) leaves torch out of sys.modules."""
    modules = [m for m in package_sources() if m.split(".")[:2] in (["profattn", "trace"], ["profattn", "analysis"],
                                                                      ["profattn", "report"])]
    assert len(modules) >= 10
    code = "import importlib, sys\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules + ["profattn", "profattn.api"])
    code += "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton', 'profattn') and (m.split('.')[0] != 'profattn' or m.startswith(('profattn.harness', 'profattn.backends')))))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"


# ---- the checker catches what it should -------------------------------------------------------------


def _src(**modules: str) -> dict[str, tuple[str, bool]]:
    """Synthetic package: keyword ``a__b__c`` is module ``a.b.c``; a name ending in ``__init`` is a package."""
    out = {}
    for key, text in modules.items():
        name = key.replace("__", ".")
        is_package = name.endswith(".init")
        out[name.removesuffix(".init")] = (textwrap.dedent(text), is_package)
    return out


GOOD = dict(
    profattn__init='"""Doc."""\nfrom profattn.api import load_run\n__version__ = "0"\n__all__ = ["load_run"]\n',
    profattn__api="from profattn.results import RunResult\n",
    profattn__results="from profattn.workload import Workload\n",
    profattn__errors="",
    profattn__workload__init="from profattn.workload.contract import Workload\n",
    profattn__workload__contract="import math\nfrom profattn.errors import ProfattnError\n",
    profattn__workload__paged="import torch\nfrom profattn.workload.contract import Workload\n",
    profattn__trace__init="from profattn.trace.kineto import load_trace\n",
    profattn__trace__kineto="import pandas\nfrom profattn.errors import TraceError\n",
    profattn__analysis__run__cells=("from profattn.trace.kineto import load_trace\nfrom profattn.families import KernelFamily\n"
                               "LIMIT = 3\nclass Evidence: pass\ndef summarize(): pass\ndef analyze_run(): pass\n"),
    profattn__analysis__run__analyze="from profattn.analysis.run.cells import Evidence, analyze_run, summarize\n",
    profattn__report__run=("from profattn.analysis.run.cells import LIMIT, Evidence, analyze_run\n"
                           "from profattn.analysis.run.analyze import Evidence as E\n"),
    profattn__analysis__common__names="import re\n",
    profattn__analysis__calls__find="from profattn.analysis.common.names import kernel_stem\n",
    profattn__analysis__simulation__replay="from profattn.analysis.calls.find import find\nfrom profattn.analysis.common import names\n",
    profattn__families="",
    profattn__backends__registry="import torch\nfrom profattn.backends.plugins import load_spec\nfrom profattn.workload import Workload\n",
    profattn__backends__plugins="import torch\n",
    profattn__harness__session="from profattn.backends.registry import get_backend\nfrom profattn.analysis.run.cells import x\n",
    profattn__cli__main="import click\n",
    profattn__cli__measure="from profattn.cli.main import main\nfrom profattn.harness.session import run\n",
)


def test_checker_accepts_a_good_package():
    assert violations(_src(**GOOD)) == []


@pytest.mark.parametrize("module, source, expected", [
    ("profattn__trace__kineto", "def f():\n    import torch\n", "profattn.trace.kineto:2: profattn.trace imports torch"),
    ("profattn__analysis__run__cells", "from profattn.harness.session import run\n", "profattn.analysis imports profattn.harness.session"),
    ("profattn__analysis__run__cells", "from profattn.backends import get_backend\n", "profattn.analysis imports profattn.backends"),
    ("profattn__trace__kineto", "from profattn.analysis.run.cells import x\n", "profattn.trace imports profattn.analysis.run.cells"),
    ("profattn__report__run", "def f():\n    from triton import language\n", "profattn.report imports triton"),
    ("profattn__backends__plugins", "from profattn.report.run import fmt_us\n", "profattn.backends imports profattn.report.run"),
    ("profattn__backends__plugins", "from profattn.cli.main import main\n", "imports the command line"),
    ("profattn__workload__contract", "import torch\n", "only profattn.workload.paged may"),
    ("profattn__workload__contract", "from profattn.results import RunResult\n", "only profattn.errors and itself"),
    ("profattn__harness__session", "from profattn.cli import main\n", "profattn.harness.session:1: profattn.harness.session imports the command line"),
    ("profattn__harness__session", "from profattn.trace.kineto import _as_int\n", "imports private name _as_int from profattn.trace.kineto"),
    ("profattn__harness__session", "def f():\n    from profattn.report.run import _plotly_js, fmt\n", "imports private name _plotly_js"),
    ("profattn__trace__init", "from profattn.trace.kineto import load_trace\nREGISTRY = {}\n", "__init__ holds a Assign"),
    ("profattn__trace__init", "def helper():\n    pass\n", "__init__ holds a FunctionDef"),
    ("profattn__report__run", "from profattn.analysis.run.cells import summarize\n",
     "report imports the analysis function summarize from profattn.analysis.run.cells"),
    ("profattn__report__run", "def f():\n    from profattn.analysis.run import cells\n",
     "report imports the analysis module profattn.analysis.run.cells whole"),
    ("profattn__report__run", "from profattn.analysis.run.analyze import summarize\n",
     "report imports the analysis function summarize from profattn.analysis.run.cells"),
    ("profattn__families", "def f():\n    from profattn.analysis.run.cells import x\n",
     "import cycle: profattn.analysis.run.cells -> profattn.families -> profattn.analysis.run.cells"),
    ("profattn__analysis__calls__find", "from profattn.analysis.run.cells import x\n",
     "profattn.analysis.calls.find:1: analysis room calls imports the higher room run (profattn.analysis.run.cells)"),
    ("profattn__analysis__common__names", "def f():\n    from profattn.analysis.simulation.replay import x\n",
     "analysis room common imports the higher room simulation"),
    ("profattn__analysis__simulation__replay", "from profattn.analysis.run.analyze import analyze_run\n",
     "analysis room simulation imports the same-rank room run"),
    ("profattn__analysis__run__cells", "def f():\n    from profattn.analysis.comparison.compare import x\n",
     "analysis room run imports the higher room comparison"),
    ("profattn__analysis__stray", "", "profattn.analysis.stray: an analysis module outside the rooms"),
    ("profattn__analysis__common__names", "from profattn.analysis.calls.find import x\n",
     "analysis room cycle: calls -> common -> calls"),
    ("profattn__backends__plugins", "from profattn.backends.registry import register\n",
     "import cycle: profattn.backends.plugins -> profattn.backends.registry -> profattn.backends.plugins"),
])
def test_checker_catches(module: str, source: str, expected: str):
    bad = _src(**{**GOOD, module: source})
    problems = violations(bad)
    assert any(expected in p for p in problems), problems


def test_checker_resolves_relative_and_submodule_imports():
    srcs = _src(profattn__trace__init="from . import kineto\n", profattn__trace__kineto="from ..harness import session\n",
                profattn__harness__init="", profattn__harness__session="")
    imps = {(i.importer, i.target) for i in collect_imports(srcs)}
    assert ("profattn.trace", "profattn.trace.kineto") in imps
    assert ("profattn.trace.kineto", "profattn.harness.session") in imps
    assert any("profattn.trace imports profattn.harness.session" in p for p in violations(srcs))
