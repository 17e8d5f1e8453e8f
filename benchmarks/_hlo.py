"""Arithmetic a compiled XLA program executes, counted from its optimized HLO: a cost
measure that does not move with the machine's load (timings here move by up to 50 %
between runs of the same program).

`executed_ops(compiled, n)` is the number of elementwise operations (add, multiply,
select, exp, ...) the program executes per point for `n` points:

* a fusion's operations on arrays run once per element of its output (XLA's loop emitter
  computes every output element on its own, so an operand broadcast over a second axis is
  recomputed for each element of that axis), its operations on scalars (indices) once; an
  in-place update (a fusion whose root is a dynamic-update-slice) computes only its update;
* an operation outside any fusion runs once per element of its output;
* a called computation runs once, a conditional's every branch (an upper bound);
* a while loop's body runs its known trip count (`known_trip_count`, which XLA records
  for `fori_loop`, `lax.map` and the like); a loop without one is counted once and
  reported in `unknown_loops`.

Data movement (copies, slices, broadcasts, concatenations), constants and reductions'
combiners are not counted: the figure is what the program computes, not what it moves.

`traced_ops(fn, args, n)` counts the same kind of operations in the program JAX hands to
XLA (its jaxpr, after automatic differentiation and vmap), each once per element of its
result, loops by their lengths: the arithmetic the program asks for (before XLA drops what
no output needs, so an upper bound of what it must compute). Where XLA executes more than
that, the excess is its fusion computing a cheap intermediate again in every fused consumer
rather than keeping it in memory.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

ELEMENTWISE = frozenset({
    "abs", "add", "and", "atan2", "cbrt", "ceil", "clamp", "compare", "convert", "cosine", "divide", "erf",
    "exponential", "exponential-minus-one", "floor", "is-finite", "log", "log-plus-one", "logistic", "maximum",
    "minimum", "multiply", "negate", "not", "or", "popcnt", "power", "remainder", "round-nearest-afz",
    "round-nearest-even", "rsqrt", "select", "shift-left", "shift-right-arithmetic", "shift-right-logical", "sign",
    "sine", "sqrt", "subtract", "tan", "tanh", "xor",
})

_HEAD = re.compile(r"^(?:ENTRY )?%?(\S+) \(")
_INSTR = re.compile(r"^\s*(?:ROOT )?%(\S+) = (\([^=]*?\)|\S+) ([a-z][a-z0-9\-]*)\((.*)$")


class Counted(NamedTuple):
    """`executed_ops`' answer: operations per point, and the loops it could not count."""

    ops_per_point: float
    unknown_loops: int


def _elements(shape: str) -> int:
    """Elements of an HLO shape string (`f64[128,256]{1,0}`; a tuple: its largest part)."""
    dims = re.findall(r"\[([\d,]*)\]", shape)
    if not dims:
        return 1
    return max(math.prod(int(d) for d in part.split(",") if d) for part in dims)


def _parse(text: str) -> tuple[dict[str, list[tuple[str, str, str, str]]], str]:
    comps: dict[str, list[tuple[str, str, str, str]]] = {}
    entry = ""
    cur: list[tuple[str, str, str, str]] | None = None
    for line in re.sub(r"/\*.*?\*/", "", text).splitlines():
        if line and not line[0].isspace():
            m = _HEAD.match(line)
            if m and line.rstrip().endswith("{"):
                cur = comps.setdefault(m.group(1), [])
                if line.startswith("ENTRY"):
                    entry = m.group(1)
                continue
            cur = None
            continue
        if cur is None:
            continue
        m = _INSTR.match(line)
        if m:
            cur.append((m.group(1), m.group(2), m.group(3), m.group(4)))
    return comps, entry


def _fused_ops(comp: list[tuple[str, str, str, str]]) -> tuple[int, int | None, int]:
    """Elementwise operations of a fused computation on arrays (run once per output
    element), the elements its root computes when that root is a dynamic-update-slice (its
    update; else None), and its operations on scalars (an index, a loop counter: run once)."""
    shapes = {name: shape for name, shape, _, _ in comp}
    ops = sum(1 for _, shape, op, _ in comp if op in ELEMENTWISE and "[]" not in shape)
    scalar = sum(1 for _, shape, op, _ in comp if op in ELEMENTWISE and "[]" in shape)
    update = None
    for _, _, op, rest in comp:
        if op == "dynamic-update-slice":
            operands = re.findall(r"%([\w.\-]+)", rest)
            if len(operands) >= 2 and operands[1] in shapes:
                update = _elements(shapes[operands[1]])
    return ops, update, scalar


def executed_ops(compiled: object, n_points: int) -> Counted:
    """Elementwise operations per point that `compiled` (a `jax.jit(...).lower(...).compile()`
    result, or its optimized HLO text) executes for `n_points` points."""
    text = compiled if isinstance(compiled, str) else compiled.as_text()  # type: ignore[attr-defined]
    comps, entry = _parse(text)
    total = 0.0
    unknown = 0

    def visit(name: str, mult: float) -> None:
        nonlocal total, unknown
        for _, shape, op, rest in comps.get(name, []):
            if op == "fusion":
                called = re.search(r"calls=%([\w.\-]+)", rest)
                ops, update, scalar = _fused_ops(comps.get(called.group(1), [])) if called else (0, None, 0)
                work = (ops * (update if update is not None else _elements(shape)) + scalar) * mult
            elif op == "while":
                body = re.search(r"body=%([\w.\-]+)", rest)
                trip = re.search(r'known_trip_count":\{"n":"(\d+)"', rest)
                if trip is None:
                    unknown += 1
                if body:
                    visit(body.group(1), mult * (int(trip.group(1)) if trip else 1))
                continue
            elif op in ("call", "conditional"):
                called = re.search(r"to_apply=%([\w.\-]+)", rest)
                branches = re.search(r"branch_computations=\{([^}]*)\}", rest)
                for sub in ([called.group(1)] if called
                            else re.findall(r"%([\w.\-]+)", branches.group(1) if branches else "")):
                    visit(sub, mult)
                continue
            elif op in ELEMENTWISE:
                work = _elements(shape) * mult
            else:
                continue
            total += work

    visit(entry, 1.0)
    return Counted(total / n_points, unknown)


#: jaxpr primitives counted by `traced_ops` (the elementwise arithmetic of `ELEMENTWISE`)
PRIMITIVES = frozenset({
    "abs", "add", "add_any", "and", "atan2", "cbrt", "ceil", "clamp", "convert_element_type", "cos", "div", "eq",
    "erf", "erf_inv", "erfc", "exp", "exp2", "expm1", "floor", "ge", "gt", "integer_pow", "is_finite", "le",
    "lgamma", "digamma", "log", "log1p", "logistic", "lt", "max", "min", "mul", "ne", "neg", "nextafter", "not", "or",
    "pow", "rem", "round", "rsqrt", "select_n", "sign", "sin", "sqrt", "square", "sub", "tan", "tanh", "xor",
})


def traced_ops(fn: Callable[..., Any], args: Sequence[Any], n_points: int) -> float:
    """Elementwise operations per point in `fn`'s jaxpr for `args` (see the module docstring):
    every equation's result elements, through calls, custom-derivative functions' bodies
    and `scan`s (times their length); a `while` loop's body counts once."""
    import jax

    def size(v: Any) -> int:
        return math.prod(getattr(v.aval, "shape", ()))

    def walk(jaxpr: Any, mult: float) -> float:
        total = 0.0
        for e in jaxpr.eqns:
            if e.primitive.name in PRIMITIVES:
                total += mult * sum(size(v) for v in e.outvars)
                continue
            inner = mult * e.params.get("length", 1) if e.primitive.name == "scan" else mult
            for p in e.params.values():
                for sub in (p if isinstance(p, (tuple, list)) else (p,)):
                    j = getattr(sub, "jaxpr", sub)
                    if hasattr(j, "eqns"):
                        total += walk(j, inner)
        return total

    return walk(jax.make_jaxpr(fn)(*args).jaxpr, 1.0) / n_points
