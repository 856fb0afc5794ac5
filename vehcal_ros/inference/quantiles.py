"""Quantiles of the normal, half-normal, chi-square and Student t distributions, from ``scipy.special``.

Each is the special function ``scipy.stats``' distribution calls for its ``ppf`` / ``isf`` (scipy 1.17:
``norm._ppf`` = ``ndtri``, ``halfnorm._ppf(q)`` = ``ndtri((1 + q) / 2)``, ``chi2._ppf`` = ``2 gammaincinv(dof / 2,
q)``, ``chi2._isf`` = ``chdtri``, ``t._ppf`` = ``stdtrit``), so the numbers are the same, bit for bit, without
importing ``scipy.stats`` (about 2 s of start-up in every node, replay worker and CLI process on a 2-core
machine). Scalars in, floats out; a probability outside [0, 1] gives nan.
"""

from __future__ import annotations

import math

from scipy import special


def normal_quantile(p: float) -> float:
    """z with Phi(z) = ``p`` for the standard normal (``scipy.stats.norm.ppf``)."""
    return float(special.ndtri(p))


def halfnormal_quantile(p: float, scale: float = 1.0) -> float:
    """x with P(|Z| scale <= x) = ``p``, Z standard normal (``scipy.stats.halfnorm.ppf(p, scale=scale)``)."""
    if not 0.0 <= p <= 1.0:
        return math.nan
    return float(special.ndtri((1.0 + p) / 2.0) * scale)


def chi2_quantile(p: float, dof: float) -> float:
    """x with P(X <= x) = ``p`` for X ~ chi-square with ``dof`` degrees of freedom (``scipy.stats.chi2.ppf``)."""
    return float(2.0 * special.gammaincinv(dof / 2.0, p))


def chi2_upper_quantile(alpha: float, dof: float) -> float:
    """x with P(X > x) = ``alpha`` for X ~ chi-square with ``dof`` degrees of freedom (``scipy.stats.chi2.isf``)."""
    return float(special.chdtri(dof, alpha))


def student_t_quantile(p: float, dof: float) -> float:
    """x with P(T <= x) = ``p`` for T ~ Student t with ``dof`` degrees of freedom (``scipy.stats.t.ppf``; its
    ends: -inf at ``p`` = 0, inf at 1)."""
    if p == 0.0 or p == 1.0:
        return -math.inf if p == 0.0 else math.inf
    return float(special.stdtrit(dof, p))
