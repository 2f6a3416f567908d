"""Names shared by every analysis room: a kernel's unqualified stem, the key launch shapes and kernels are matched on
across traces, counters and runs.

In: a kernel name as Kineto or ncu demangles it; out: a plain string. Nothing here reads a trace or a run.
"""

from __future__ import annotations

import re


def kernel_stem(name: str) -> str:
    """A kernel's unqualified function name, without template arguments, parameters or ``void``.

    Kineto and ncu demangle the same kernel differently (``at::native::(anonymous namespace)::f<false>``
    against ``at::<unnamed>::f<0>``), so launch shapes are matched on this stem plus the shape itself.
    """
    n = name.replace("(anonymous namespace)", "anon").replace("<unnamed>", "anon").strip()
    n = n.removeprefix("void ").strip()
    head = re.split(r"[<(]", n, maxsplit=1)[0].strip()
    return head.rsplit("::", 1)[-1]
