"""Loop fission for math-heavy elementwise bodies: two loops over a chunk instead of one.

Why: float32 silu is one ~100-cycle dependency chain per element (the double-float exp, a
division, the quotient's correction) of ~60 vector instructions; the out-of-order core holds
about three such iterations, so the loop runs at the chain's latency, not at the machine's
throughput (llvm-mca, AMD Zen 2: 19 cycles per 8 elements by ports, 38 measured). Cut at half
the chain's latency, each loop's chain is half as long and twice as many iterations overlap;
the values the second loop needs go through small stack arrays (L1 stores and loads, cheap
beside the math). The statements are the same, so are the bits.
"""

from __future__ import annotations

from ...elementwise.expr import Expr, topo

# Rough latencies in cycles (Zen 2 / Skylake float vector ops): only the cut's balance needs them.
LATENCY = {"fma": 5, "add": 3, "sub": 3, "mul": 3, "div": 13, "sqrt": 18}
LEAVES = ("input", "param", "const")
MIN_NODES = 40          # lighter bodies gain nothing measurable (sigmoid f16: none)
MAX_CROSSING = 8        # values handed from the first loop to the second


def split(results) -> list[Expr] | None:
    """The nodes the first loop computes and hands to the second, cut where the latency-weighted
    depth reaches half of the body's, or None (a light body, or a cut too wide). Booleans are
    not handed over: the second loop recomputes them from what is (a compare and a select)."""
    order = topo(results)
    if sum(n.op not in LEAVES for n in order) < MIN_NODES:
        return None
    depth: dict[int, int] = {}
    for n in order:
        if n.op in LEAVES:
            depth[id(n)] = 0
        else:
            depth[id(n)] = max(depth[id(a)] for a in n.args) + LATENCY.get(n.op, 1)
    half = max(depth[id(r)] for r in results) / 2
    first = {id(n) for n in order if n.op not in LEAVES and depth[id(n)] <= half}
    crossing: dict[int, Expr] = {}
    seen: set[int] = set()
    stack = list(results)
    while stack:
        n = stack.pop()
        if n.op in LEAVES or id(n) in seen:
            continue
        seen.add(id(n))
        if id(n) in first and n.dtype != "bool":
            crossing[id(n)] = n
        else:
            stack.extend(n.args)
    second = sum(1 for n in order if id(n) not in first and n.op not in LEAVES)
    if not crossing or len(crossing) > MAX_CROSSING or second < MIN_NODES // 4:
        return None
    return [n for n in order if id(n) in crossing]
