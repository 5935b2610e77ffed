# stats.py: statistics over seeds in pure Python: mean, sd, Student-t 95% intervals, paired differences, verdicts.
"""Statistics over training seeds, in pure Python (no numpy or scipy).

  mean(xs), sample_sd(xs)            sd with n - 1 (None for fewer than two values)
  t_cdf(t, df), t_quantile(p, df)    Student's t, through the regularized incomplete beta function
  t_critical(df)                     the two-sided 95% multiplier of Student's t
  summary(xs)                        n, mean, sd and the two-sided 95% t interval (None for n < 2)
  paired_difference(x, y)            x - y over the seeds both have, summarized as above
  verdict(ci_low, ci_high, sign)     "supports" / "contradicts" / "unresolved": what the raw interval says
  t_test_p(summary)                  two-sided p of a one-sample t test of mean 0 (None for n < 2)
  holm(ps)                           Holm-adjusted p-values of one family of claims (None entries kept)
  gated_verdict(...)                 "supports" / "contradicts" only when the runs pass their gates and the
                                     difference survives the family's correction; else "inconclusive" and why
  slope(xs, ys)                      least-squares slope of ys on xs
  flattened(evals, steps)            whether a run's valid BPC still improved over its last 20% of steps
  chi2_cdf(x, df)                    P(X <= x) for a chi-square with df degrees of freedom
  half_width_probability(sd, k, h)   how often k seeds drawn with standard deviation sd give a 95% interval within
                                     +-h (the sample sd of normal draws: (k - 1) s^2 / sd^2 is chi-square, k - 1)
  seeds_for_half_width(sd, h)        fewest seeds whose interval is within +-h when their sd comes out at sd

An interval is never made up: with one value there is none, and a verdict needs one.
"""
import math

CONFIDENCE = 0.95
FLAT_FRACTION = 0.8  # the learning curve is judged over the steps after this fraction of the run
FLAT_THRESHOLD = 0.03  # BPC gained over that last stretch below which a run counts as flattened
VALID_BPC_BOUND = 2.4  # a run ending above this valid BPC is too far from trained to say anything about the paper
ALPHA = 1.0 - CONFIDENCE  # family-wise error rate of the Holm correction


def mean(xs):
    xs = list(xs)
    if not xs:
        raise ValueError("mean: no values")
    return math.fsum(xs) / len(xs)


def sample_sd(xs):
    """Sample standard deviation (n - 1 in the denominator); None for fewer than two values."""
    xs = list(xs)
    if len(xs) < 2:
        return None
    m = mean(xs)
    return math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def _beta_fraction(a, b, x):
    """Continued fraction of the incomplete beta function (modified Lentz); converges for x < (a+1)/(a+b+2)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    # Convergence takes about sqrt(max(a, b)) terms: large degrees of freedom need many.
    for m in range(1, 100000):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            return h
    raise ArithmeticError(f"incomplete beta: no convergence for a={a}, b={b}, x={x}")


def betainc(a, b, x):
    """Regularized incomplete beta function I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"betainc: x must lie in [0, 1], got {x}")
    if x in (0.0, 1.0):
        return x
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def t_cdf(t, df):
    """P(T <= t) for Student's t with df > 0 degrees of freedom."""
    if not df > 0:
        raise ValueError(f"t_cdf: df must be > 0, got {df}")
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))  # P(T > |t|)
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p, df):
    """The t with t_cdf(t, df) = p, by bisection (to about 1e-12 relative)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"t_quantile: p must lie in (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, 2.0 * hi
    while hi - lo > 1e-12 * hi:
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def t_critical(df):
    """The two-sided CONFIDENCE multiplier of Student's t with df degrees of freedom (4.30 at df = 2)."""
    return t_quantile(0.5 + CONFIDENCE / 2.0, df)


def summary(xs):
    """{"n", "mean", "sd", "ci95": [low, high] or None, "half_width"}: the Student-t interval needs n >= 2."""
    xs = list(xs)
    out = {"n": len(xs), "mean": mean(xs) if xs else None, "sd": sample_sd(xs), "ci95": None, "half_width": None}
    if out["sd"] is not None:
        half = t_critical(len(xs) - 1) * out["sd"] / math.sqrt(len(xs))
        out["ci95"] = [out["mean"] - half, out["mean"] + half]
        out["half_width"] = half
    return out


def _by_seed(values):
    return dict(values.items() if hasattr(values, "items") else values)


def paired_difference(x, y):
    """x - y seed by seed over the seeds both have (x, y: {seed: value} or [(seed, value)]).

    Returns summary() of the differences plus "seeds" (paired, sorted) and "dropped_seeds" (in one only)."""
    x, y = _by_seed(x), _by_seed(y)
    seeds = sorted(set(x) & set(y), key=_seed_order)
    out = summary([x[s] - y[s] for s in seeds])
    out["seeds"] = seeds
    out["dropped_seeds"] = sorted(set(x) ^ set(y), key=_seed_order)
    return out


def _seed_order(seed):
    return (seed is not None, seed if isinstance(seed, (int, float)) else str(seed))


def verdict(ci_low, ci_high, paper_sign):
    """What a 95% interval of a difference says about a predicted sign (paper_sign > 0: difference > 0).

    "supports" when the interval lies wholly on the predicted side of zero, "contradicts" when wholly on the
    other side, "unresolved" when it contains zero or there is no interval (fewer than two seeds)."""
    if ci_low is None or ci_high is None:
        return "unresolved"
    if paper_sign == 0:
        raise ValueError("verdict: paper_sign must be positive or negative, got 0")
    if ci_low > 0.0:
        return "supports" if paper_sign > 0 else "contradicts"
    if ci_high < 0.0:
        return "supports" if paper_sign < 0 else "contradicts"
    return "unresolved"


def flattened(evals, steps):
    """(improvement, flattened) of one run's valid evaluations, or None with too few of them.

    improvement: valid BPC at the last evaluation at or before FLAT_FRACTION of `steps` minus the last
    evaluation's BPC; flattened when it is below FLAT_THRESHOLD (the run had stopped learning much)."""
    if not is_number(steps) or steps <= 0:
        return None
    curve = valid_curve(evals)
    early = [c for c in curve if c[0] <= FLAT_FRACTION * steps]
    if not early or early[-1][0] >= curve[-1][0]:
        return None
    improvement = early[-1][1] - curve[-1][1]
    return improvement, improvement < FLAT_THRESHOLD


def valid_curve(evals, key="bpc"):
    """[(step, value of key)] of a record's valid evaluations, by step (entries without both numbers are left out)."""
    return sorted((e["step"], e[key]) for e in evals or [] if isinstance(e, dict) and
                  e.get("split", "valid") == "valid" and is_number(e.get("step")) and is_number(e.get(key)))


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def t_test_p(s):
    """Two-sided p-value of a one-sample t test of mean 0 from summary(xs); None with fewer than two values."""
    if not s or s.get("sd") is None or s.get("n", 0) < 2:
        return None
    if s["sd"] == 0.0:
        return 0.0 if s["mean"] != 0.0 else 1.0
    t = s["mean"] / (s["sd"] / math.sqrt(s["n"]))
    return min(1.0, 2.0 * (1.0 - t_cdf(abs(t), s["n"] - 1)))


def holm(ps):
    """Holm's step-down adjusted p-values for one family (same order as ps; None entries are not tests)."""
    tested = sorted((p, i) for i, p in enumerate(ps) if p is not None)
    out = [None] * len(ps)
    running = 0.0
    m = len(tested)
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def gated_verdict(ci_low, ci_high, paper_sign, p_adjusted=None, failed_gates=()):
    """(verdict, reason): "supports" / "contradicts" only when no gate failed, the raw interval excludes zero and the
    Holm-adjusted p is below ALPHA; otherwise "inconclusive" with the first reason that holds."""
    raw = verdict(ci_low, ci_high, paper_sign)
    if failed_gates:
        return "inconclusive", "gate failed: " + "; ".join(failed_gates)
    if ci_low is None or ci_high is None:
        return "inconclusive", "fewer than 2 paired seeds"
    if raw == "unresolved":
        return "inconclusive", "95% interval contains zero"
    if p_adjusted is not None and p_adjusted >= ALPHA:
        return "inconclusive", f"interval excludes zero but not after the Holm correction (adjusted p {p_adjusted:.3g})"
    return raw, "interval excludes zero after the Holm correction"


def run_gates(rows):
    """The gates a set of runs fails, in words: not flattened, or ending above the valid-BPC bound.

    rows: dicts with "flattened" (True/False/None) and "valid_bpc"."""
    failed = []
    not_flat = [r for r in rows if r.get("flattened") is not True]
    if not_flat:
        failed.append(f"runs not flattened ({len(not_flat)} of {len(rows)})")
    above = [r for r in rows if not is_number(r.get("valid_bpc")) or r["valid_bpc"] > VALID_BPC_BOUND]
    if above:
        failed.append(f"valid BPC above the {VALID_BPC_BOUND} bound ({len(above)} of {len(rows)})")
    return failed


def slope(xs, ys):
    """Least-squares slope of ys on xs (at least two distinct xs)."""
    xs, ys = list(xs), list(ys)
    if len(xs) != len(ys) or len(set(xs)) < 2:
        raise ValueError("slope: needs two or more distinct x values, one y each")
    mx, my = mean(xs), mean(ys)
    return math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys)) / math.fsum((x - mx) ** 2 for x in xs)


def binomial_interval(successes, n):
    """Wilson 95% interval of a proportion; None for n = 0."""
    if not n:
        return None
    z = 1.959963984540054
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [centre - half, centre + half]


def _gamma_p(a, x):
    """Regularized lower incomplete gamma P(a, x): its series below a + 1, the continued fraction of Q above."""
    if x <= 0.0:
        return 0.0
    log_front = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1.0:
        term = total = 1.0 / a
        for n in range(1, 100000):
            term *= x / (a + n)
            total += term
            if abs(term) < abs(total) * 1e-16:
                return total * math.exp(log_front)
    else:
        tiny = 1e-300
        b = x + 1.0 - a
        c, d = 1.0 / tiny, 1.0 / b
        h = d
        for n in range(1, 100000):
            an = -n * (n - a)
            b += 2.0
            d = an * d + b
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = b + an / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
            if abs(d * c - 1.0) < 1e-15:
                return 1.0 - math.exp(log_front) * h
    raise ArithmeticError(f"incomplete gamma: no convergence for a={a}, x={x}")


def chi2_cdf(x, df):
    """P(X <= x) for a chi-square variable with df > 0 degrees of freedom."""
    if not df > 0:
        raise ValueError(f"chi2_cdf: df must be > 0, got {df}")
    return _gamma_p(df / 2.0, x / 2.0)


def half_width_probability(sd, k, h):
    """P(the 95% t interval of k seeds is within +-h) when each seed's value has standard deviation sd (normal).

    The half-width t * s / sqrt(k) is within h when s <= h sqrt(k) / t, and (k - 1) s^2 / sd^2 is chi-square with
    k - 1 degrees of freedom. With sd from the same seeds this is a plug-in estimate, not a bound."""
    if k < 2:
        raise ValueError(f"half_width_probability: needs k >= 2 seeds, got {k}")
    if sd == 0.0:
        return 1.0
    s_max = h * math.sqrt(k) / t_critical(k - 1)
    return chi2_cdf((k - 1) * s_max * s_max / (sd * sd), k - 1)


def seeds_for_half_width(sd, h, most=1000):
    """The fewest seeds n >= 2 with t(n - 1) sd / sqrt(n) <= h (None beyond `most`)."""
    for n in range(2, most + 1):
        if t_critical(n - 1) * sd / math.sqrt(n) <= h:
            return n
    return None
