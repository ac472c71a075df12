"""Fitting mathlib's polynomial coefficients (support tool, not shipped; run to reproduce).

``fit(f, powers, lo, hi, weight)`` finds c minimising max |weight(x) * (f(x) - sum c_k x^p_k)|
over [lo, hi] (Lawson's iteratively reweighted least squares on a dense grid, in mpmath), then
rounds the coefficients to the target float type one at a time, lowest power first, refitting
the others after each rounding. Prints the coefficients as hex floats and the max weighted error.
"""

from __future__ import annotations

import mpmath as mp
import numpy as np


def _lawson(f, powers, xs, weight, iters):
    fx = [f(x) for x in xs]
    wx = [weight(x) for x in xs]
    lam = [mp.mpf(1)] * len(xs)
    c = None
    for _ in range(iters):
        n = len(powers)
        A = mp.matrix(n, n)
        b = mp.matrix(n, 1)
        for x, fv, w, l in zip(xs, fx, wx, lam):
            row = [w * x ** p for p in powers]
            for i in range(n):
                b[i] += l * row[i] * w * fv
                for j in range(n):
                    A[i, j] += l * row[i] * row[j]
        c = mp.lu_solve(A, b)
        err = [abs(w * (fv - sum(c[i] * x ** p for i, p in enumerate(powers))))
               for x, fv, w in zip(xs, fx, wx)]
        tot = sum(l * e for l, e in zip(lam, err))
        lam = [l * e / tot for l, e in zip(lam, err)]
    return [c[i] for i in range(len(powers))]


def max_err(f, powers, coeffs, xs, weight):
    return max(abs(weight(x) * (f(x) - sum(c * x ** p for c, p in zip(coeffs, powers)))) for x in xs)


def fit(f, powers, lo, hi, weight=lambda x: 1, ftype=np.float32, npts=400, iters=30, dps=50):
    mp.mp.dps = dps
    lo, hi = mp.mpf(lo), mp.mpf(hi)
    sc = max(abs(lo), abs(hi))                         # fit in u = x / sc: a well-conditioned basis
    us = [(lo + (hi - lo) * (1 - mp.cos(mp.pi * k / (npts - 1))) / 2) / sc for k in range(npts)]
    us = [u for u in us if u != 0] if any(p < 0 for p in powers) else us
    fixed = []                                         # (power, coefficient in x)
    rest = list(powers)

    def g_minus_fixed(u):
        x = u * sc
        return f(x) - sum(c * x ** p for p, c in fixed)

    wu = lambda u: weight(u * sc)  # noqa: E731
    if ftype is np.float64 and len(rest) > 12:            # rounding matters little: once
        c = _lawson(g_minus_fixed, rest, us, wu, iters)
        fixed = [(p, mp.mpf(float(v / sc ** p))) for p, v in zip(rest, c)]
        fit.exact = [v / sc ** p for p, v in zip(rest, c)]  # for double-double leading terms
        rest = []
    while rest:
        c = _lawson(g_minus_fixed, rest, us, wu, iters)
        fixed.append((rest[0], mp.mpf(float(ftype(c[0] / sc ** rest[0])))))
        rest = rest[1:]
    coeffs = [c for _, c in fixed]
    xs = [u * sc for u in us]
    e = max_err(f, powers, coeffs, xs, weight)
    return [float(c) for c in coeffs], float(e)


def show(name, coeffs, err):
    print(f"{name}: max weighted error {err:.3e} (2^{np.log2(err):.1f})")
    for c in coeffs:
        print(f"    float.fromhex('{c.hex()}'),  # {c!r}")


if __name__ == "__main__":
    import sys

    which = sys.argv[1:] or ["exp_f32"]
    if "exp_f32" in which:
        # exp(r) = 1 + r + r^2/2 + (r^3/2) P(r), |r| <= ln2/2 (+ reduction slack)
        def P(r):
            return 2 * (mp.exp(r) - 1 - r - r * r / 2) / r ** 3 if r != 0 else mp.mpf(1) / 3
        for deg in (3, 4, 5):
            c, e = fit(P, list(range(deg + 1)), -0.3466, 0.3466, lambda r: abs(r) ** 3 / 2)
            show(f"exp_f32 P deg {deg}", c, e)
    if "log_f32" in which:
        # log(1+f) = 2 atanh(s) = 2s + s^3 Q(s^2), s = f/(2+f), |s| <= 0.17158 (m in [sqrt2/2, sqrt2))
        def Q(s2):
            s = mp.sqrt(s2)
            return (2 * mp.atanh(s) - 2 * s) / s ** 3 if s2 != 0 else mp.mpf(2) / 3
        for deg in (2, 3, 4):
            c, e = fit(Q, list(range(deg + 1)), 0, 0.17158 ** 2, lambda s2: mp.sqrt(s2) ** 3)
            show(f"log_f32 Q deg {deg}", c, e)
    if "f32_via_f64" in which:
        # float64 helpers for the float32 erf family: ~2^-36 relative is plenty
        def E(r):
            return (mp.exp(r) - 1 - r) / r ** 2 if r != 0 else mp.mpf(1) / 2
        c, e = fit(E, list(range(7)), -0.3466, 0.3466, lambda r: r * r, ftype=np.float64, iters=12)
        show("exp f64 (r^2 weighted): exp(r) = 1 + r + r^2 E(r)", c, e)

        def ERF(x2):
            x = mp.sqrt(x2)
            return mp.erf(x) / x if x2 != 0 else 2 / mp.sqrt(mp.pi)
        c, e = fit(ERF, list(range(7)), 0, 0.75 ** 2, lambda x2: 1, ftype=np.float64, iters=12)
        show("erf(x)/x = P(x^2), |x| <= 0.75", c, e)

        K = 3
        vlo, vhi = 1 / (11 + K), 1 / K
        vc = (vlo + vhi) / 2
        print("vc", float(vc).hex())

        def G(w):
            x = 1 / (w + vc) - K
            return (x + K) * mp.erfc(x) * mp.exp(x * x)
        c, e = fit(G, list(range(12)), vlo - vc, vhi - vc, lambda w: 1 / G(w), ftype=np.float64,
                   iters=12, npts=250)
        show(f"(z + {K}) exp(z^2) erfc(z) = G(1/(z + {K}) - vc), 0 <= z <= 11", c, e)

        def H(t):
            x = K * (1 + t) / (1 - t)
            return (1 + 2 * x) * mp.erfc(x) * mp.exp(x * x)
        c, e = fit(H, list(range(14)), -1, (11 - K) / (11 + K), lambda t: 1, ftype=np.float64,
                   iters=12, npts=250)
        show(f"(1 + 2x) exp(x^2) erfc(x) = H(t), t = (x - {K})/(x + {K})", c, e)
    if "f64" in which:
        def P(r):
            return 2 * (mp.exp(r) - 1 - r - r * r / 2) / r ** 3 if r != 0 else mp.mpf(1) / 3
        for deg in (8, 9, 10):
            c, e = fit(P, list(range(deg + 1)), -0.3466, 0.3466, lambda r: abs(r) ** 3 / 2,
                       ftype=np.float64, iters=15, npts=300, dps=60)
            show(f"exp_f64 P deg {deg}", c, e)

        def Q(t2):
            t = mp.sqrt(t2)
            return (2 * mp.atanh(t / 2) - t) / t ** 3 if t2 != 0 else mp.mpf(1) / 12
        for deg in (7, 8, 9):
            c, e = fit(Q, list(range(deg + 1)), 0, 0.3432 ** 2, lambda t2: t2,
                       ftype=np.float64, iters=15, npts=300, dps=60)
            show(f"log_f64 Q deg {deg} (weight t^2: error relative to t)", c, e)
    if "erfinv_f32" in which:
        # initial guess for float32 erfinv (refined by a Newton step in float64):
        # erfinv(x) = x P(w), w = -log(1 - x^2): P_a(w - 2.5) for w < 5, P_b(sqrt(w) - 3) above
        def ratio(w):
            x = mp.sqrt(1 - mp.exp(-w))
            return mp.erfinv(x) / x if w != 0 else mp.sqrt(mp.pi) / 2
        c, e = fit(lambda u: ratio(u + 2.5), list(range(9)), -2.5, 2.5, lambda u: 1 / ratio(u + 2.5),
                   iters=10, npts=120)
        show("erfinv P_a(w - 2.5), w < 5 (relative)", c, e)
        c, e = fit(lambda u: ratio((u + 3) ** 2), list(range(9)), mp.sqrt(5) - 3, mp.sqrt(17) - 3,
                   lambda u: 1 / ratio((u + 3) ** 2), iters=10, npts=120)
        show("erfinv P_b(sqrt(w) - 3), 5 <= w < 17 (relative)", c, e)
    if "erf_f64" in which:
        def ERFM1(x2):
            x = mp.sqrt(x2)
            return mp.erf(x) / x - 1 if x2 != 0 else 2 / mp.sqrt(mp.pi) - 1
        c, e = fit(ERFM1, list(range(13)), 0, 0.75 ** 2, lambda x2: 1, ftype=np.float64,
                   iters=8, npts=200, dps=45)
        show("erf(x) = x + x P(x^2), |x| <= 0.75 (absolute error of P)", c, e)
    if "erfc_f64" in which:
        # z in [2, 27.3]: erfc(z) = exp(-z^2) / (z sqrt(pi)) (1 + k(1/z^2)), k small
        def k(u):
            z = 1 / mp.sqrt(u)
            return z * mp.sqrt(mp.pi) * mp.erfc(z) * mp.exp(z * z) - 1
        c, e = fit(k, list(range(1, 18)), 1 / 27.3 ** 2, 0.25, lambda u: 1, ftype=np.float64,
                   iters=8, npts=220, dps=45)
        show("erfc: k(u) = z sqrt(pi) exp(z^2) erfc(z) - 1, u = 1/z^2, 2 <= z <= 27.3 (absolute)", c, e)
        # z in [0.7, 2.1]: erfc(z) = exp(-z^2) v G(v - VCA), v = 1/(z + 3)
        vlo, vhi = 1 / 5.1, 1 / 3.7
        vca = (vlo + vhi) / 2
        print("VCA", float(vca).hex())

        def G(w):
            x = 1 / (w + vca) - 3
            return (x + 3) * mp.erfc(x) * mp.exp(x * x)
        c, e = fit(G, list(range(15)), vlo - vca, vhi - vca, lambda w: 1 / G(w), ftype=np.float64,
                   iters=8, npts=220, dps=45)
        show("erfc: G_A, 0.7 <= z <= 2.1 (relative)", c, e)
    if "erfc_f64_bc" in which:
        for name, zlo, zhi, deg in (("G_B", 2.0, 6.1, 16), ("G_C", 6.0, 27.3, 16)):
            vlo, vhi = 1 / (zhi + 3), 1 / (zlo + 3)
            vc = (vlo + vhi) / 2
            print(name, "VC", float(vc).hex())

            def G(w, vc=vc):
                x = 1 / (w + vc) - 3
                return (x + 3) * mp.erfc(x) * mp.exp(x * x)
            c, e = fit(G, list(range(deg + 1)), vlo - vc, vhi - vc, lambda w, G=G: 1 / G(w),
                       ftype=np.float64, iters=8, npts=220, dps=45)
            show(f"erfc: {name}, {zlo} <= z <= {zhi} (relative)", c, e)
    if "gelu_fast" in which:
        # float32 G for fp16/bf16 results: (z + 3) exp(z^2) erfc(z) = G(1/(z + 3) - VC), 0 <= z <= 11
        K = 3
        vlo, vhi = 1 / (11 + K), 1 / K
        vc = (vlo + vhi) / 2
        print("vc", float(np.float32(float(vc))).hex())
        vc = mp.mpf(float(np.float32(float(vc))))

        def G(w):
            x = 1 / (w + vc) - K
            return (x + K) * mp.erfc(x) * mp.exp(x * x)
        for deg in (6, 7, 8):
            c, e = fit(G, list(range(deg + 1)), vlo - vc, vhi - vc, lambda w: 1 / G(w), iters=10,
                       npts=150)
            show(f"G f32 deg {deg}", c, e)
    if "erfinv_f64_c" in which:
        def ratio(w):
            x = mp.sqrt(-mp.expm1(-w))
            return mp.erfinv(x) / x
        mp.mp.dps = 60
        c, e = fit(lambda u: ratio((u + 5) ** 2), list(range(8)), mp.sqrt(16.5) - 5, mp.sqrt(38) - 5,
                   lambda u: 1 / ratio((u + 5) ** 2), iters=8, npts=100, dps=60)
        show("erfinv P_c(sqrt(w) - 5), 16.5 <= w < 38 (relative)", c, e)
    if "erfc_f64_dd" in which:
        # the three float64 erfc pieces with double-double leading coefficients (hi, lo)
        for name, zlo, zhi, deg in (("GA", 0.7, 2.1, 15), ("GB", 2.0, 6.1, 18), ("GC", 6.0, 27.3, 16)):
            vlo, vhi = 1 / (zhi + 3), 1 / (zlo + 3)
            vc = mp.mpf(float((vlo + vhi) / 2))
            print(name, "VC", float(vc).hex())

            def G(w, vc=vc):
                x = 1 / (w + vc) - 3
                return (x + 3) * mp.erfc(x) * mp.exp(x * x)
            c, e = fit(G, list(range(deg + 1)), vlo - vc, vhi - vc, lambda w, G=G: 1 / G(w),
                       ftype=np.float64, iters=8, npts=240, dps=50)
            show(f"erfc {name}, {zlo} <= z <= {zhi} (relative)", c, e)
            print("    lo parts:", [float(v - mp.mpf(float(v))).hex() for v in fit.exact[:3]])
            sys.stdout.flush()
    if "erf_half" in which:
        # float32 erf for fp16/bf16 results: x P(x^2 - 4.5) for |x| <= 3 (erf(3) rounds to 1),
        # and erfc's small branch 1 - x P4(x^2), |x| < 0.75 (relative errors)
        def E(w):
            x = mp.sqrt(w + mp.mpf(4.5))
            return mp.erf(x) / x if x != 0 else 2 / mp.sqrt(mp.pi)
        c, e = fit(E, list(range(13)), -4.5, 4.5, lambda w: 1 / E(w), iters=12, npts=160, dps=40)
        show("erf(x) = x P(x^2 - 4.5), |x| <= 3 (relative)", c, e)
        sys.stdout.flush()
        c, e = fit(lambda u: E(u - 4.5), list(range(5)), 0, 0.75 ** 2,
                   lambda u: 1 / E(u - 4.5), iters=12, npts=120, dps=40)
        show("erf(x) = x P(x^2), |x| <= 0.75 (relative)", c, e)
