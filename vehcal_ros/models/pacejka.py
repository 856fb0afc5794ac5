"""Pacejka magic formula for the longitudinal friction curve mu(s) and its maximum (numba kernels).

Friction paper (Mussot et al. 2022, doi:10.1016/j.conengprac.2021.105048), Eq. (5)::

    mu = D sin(C atan(B x - E (B x - atan(B x)))) + s_v,   x = s + s_h

with ``theta = (B, C, D, E, s_h, s_v)`` (Eq. 6; B stiffness factor 1/slip, C shape factor, D peak value,
E curvature factor, s_h horizontal shift in slip, s_v vertical shift in friction; all but B and s_h are
dimensionless). Kernels are ``@njit(cache=True, nogil=True)`` so the samplers call them inside their loops.

Curve maximum (the grip potential mu_max, Eq. 2, and the slip at which it occurs). Write u = B x,
phi(u) = (1 - E) u + E atan(u) and g = C atan(phi). Then df/ds = D cos(g) C phi'(u) B / (1 + phi^2) and,
for E <= 1, phi'(u) = 1 - E u^2/(1 + u^2) > 0, so phi is strictly increasing in u. Hence (B, D > 0):

* C > 1 and E <= 1: the only stationary point is g = pi/2, i.e. phi* = tan(pi / (2 C)); u* solves the monotone
  equation phi(u*) = phi* (safeguarded Newton), s* = u*/B - s_h and mu_max = D + s_v exactly. The maximum is
  taken over the slip domain [0, S_DOMAIN_MAX]: if s* > S_DOMAIN_MAX the curve still rises there and the maximum
  is the end value; if s* < 0 it falls on the whole domain (valid for C < 3, i.e. inside Table 3's C <= 2)
  and the maximum is at s = 0.
* C <= 1 and E <= 1: g < pi/2 for all s, the curve rises monotonically (no interior peak), so the maximum over
  the domain is at s = S_DOMAIN_MAX = 1.0. Such curves are what the physical prior of Section 4.2.2 rejects.
* otherwise (E > 1 or C >= 3, outside Table 3): the maximum of a dense grid over [0, S_DOMAIN_MAX].
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from vehcal_ros.models.vector_math import atan as vm_atan
from vehcal_ros.models.vector_math import sincos as vm_sincos

N_THETA = 6
THETA_NAMES = ("B", "C", "D", "E", "s_h", "s_v")
#: slip domain [0, S_DOMAIN_MAX] over which the curve maximum is taken (the physical slip ratio is <= 1)
S_DOMAIN_MAX = 1.0
_GRID_N = 4001


@njit(cache=True, nogil=True)
def mf(s: float, B: float, C: float, D: float, E: float, sh: float, sv: float) -> float:
    """Magic formula friction at slip ``s`` (friction paper, Eq. 5)."""
    u = B * (s + sh)
    phi = u - E * (u - math.atan(u))
    return D * math.sin(C * math.atan(phi)) + sv


@njit(cache=True, nogil=True)
def mf_curve(s: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """Friction ``mu[N]`` (-) at slips ``s[N]`` for one ``theta[6]`` (Eq. 5)."""
    out = np.empty(s.shape[0])
    B, C, D, E, sh, sv = theta[0], theta[1], theta[2], theta[3], theta[4], theta[5]
    for i in range(s.shape[0]):
        out[i] = mf(s[i], B, C, D, E, sh, sv)
    return out


@njit(cache=True, nogil=True)
def sse(s: np.ndarray, mu: np.ndarray, theta: np.ndarray) -> float:
    """Least-squares cost V(theta) = sum (mu_i - f(s_i, theta))^2 (friction paper, Eq. 14)."""
    B, C, D, E, sh, sv = theta[0], theta[1], theta[2], theta[3], theta[4], theta[5]
    acc = 0.0
    for i in range(s.shape[0]):
        u = B * (s[i] + sh)
        phi = u - E * (u - math.atan(u))
        r = mu[i] - D * math.sin(C * math.atan(phi)) - sv
        acc += r * r
    return acc


_LOG_2PI = math.log(2.0 * math.pi)


@njit(cache=True, nogil=True)
def gauss_nll(s: np.ndarray, mu: np.ndarray, theta: np.ndarray, sigma2: float, slip_var: np.ndarray,
              mu_var: np.ndarray) -> float:
    """Exact negative log likelihood of the Gaussian errors-in-variables model (nats)::

        -log p(mu | s, theta, sigma) = 1/2 sum_i [ log(2 pi Var_i) + r_i^2 / Var_i ],
        Var_i = sigma^2 + v_mu_i + f'(s_i)^2 v_s_i,   r_i = mu_i - f(s_i, theta)

    (friction paper Eq. 22 with each residual's variance widened by the friction variance ``mu_var`` of an
    estimated force and by the slip variance ``slip_var`` carried through the curve's slope f' = d mu / d s:
    the effective-variance, first-order errors-in-variables likelihood). Because f' depends on theta, the
    log-variance term is part of the posterior and not a constant. ``slip_var`` / ``mu_var`` of length 0 mean
    zero (the paper's Eq. 22: 1/2 N log(2 pi sigma^2) + V / (2 sigma^2)). Units: friction^2 for sigma2 and
    mu_var, slip^2 for slip_var. Pure longitudinal slip: :func:`gauss_nll_lat` with no lateral slip.
    """
    return gauss_nll_lat(s, mu, theta, sigma2, slip_var, mu_var, _NO_LATERAL)


_NO_LATERAL = np.zeros(0)


@njit(cache=True, nogil=True, inline="always")
def combined(s: float, f0: float, df0: float, lat_d: float) -> tuple[float, float]:
    """Friction ellipse (Chrono ChPac02Tire's combination for a tire without combined-slip coefficients, the
    ADAMS method) at small shifts: the longitudinal friction at slip ratio ``s`` of a tire running at a slip angle,
    h = f0 |s| / sqrt(s^2 + f0^2 lat_d^2), with f0 = f(s) the pure-slip curve, ``df0`` its slope and
    lat_d = |sin alpha| / mu_y,max = |sin alpha| / (rho mu_max) (rho = lateral / longitudinal friction peak); and
    dh/ds = (f0' |s|^3 + sign(s) f0^3 lat_d^2) / Q^3, Q = sqrt(s^2 + f0^2 lat_d^2). lat_d = 0: (f0, f0').
    At small slip h = K s / sqrt(1 + K^2 lat_d^2) (K = f0 / s): the lateral slip lowers the apparent slip
    stiffness the more, the lower the road's friction; at the curve's top the factor tends to 1. Inlined into
    its numba callers (the likelihood's per-sample loop stays vectorisable)."""
    if lat_d <= 0.0:
        return f0, df0
    a = abs(s)
    q2 = s * s + f0 * f0 * lat_d * lat_d
    if q2 <= 0.0:
        return 0.0, df0
    q = math.sqrt(q2)
    sg = 1.0 if s >= 0.0 else -1.0
    return f0 * a / q, (df0 * a * a * a + sg * f0 * f0 * f0 * lat_d * lat_d) / (q2 * q)


@njit(cache=True, nogil=True)
def gauss_nll_lat(s: np.ndarray, mu: np.ndarray, theta: np.ndarray, sigma2: float, slip_var: np.ndarray,
                  mu_var: np.ndarray, lat: np.ndarray) -> float:
    """:func:`gauss_nll` of samples taken at a slip angle: f(s_i) replaced by the friction-ellipse longitudinal
    friction :func:`combined` with lat_d = ``lat_i`` / D, ``lat_i`` = |sin alpha_i| / rho (0 = pure slip), and
    f' by its slope. ``lat`` of length 0 = pure slip everywhere (the paper's model). Allocates its work space;
    the chains call :func:`gauss_nll_lat_into`."""
    return gauss_nll_lat_into(s, mu, theta, sigma2, slip_var, mu_var, lat, np.zeros((3, s.shape[0])))


@njit(cache=True, nogil=True, error_model="numpy")
def gauss_nll_lat_into(s: np.ndarray, mu: np.ndarray, theta: np.ndarray, sigma2: float, slip_var: np.ndarray,
                       mu_var: np.ndarray, lat: np.ndarray, work: np.ndarray) -> float:
    """:func:`gauss_nll_lat` with the caller's work space ``work`` [3, >= n] whose row 2 holds zeros (the variances
    of samples without ``slip_var`` / ``mu_var``; allocate it with ``np.zeros``). Two passes: the per-sample terms
    (:func:`_eiv_terms`: no calls, no branches, so LLVM vectorises it), then their sum in sample order, sum log Var_i
    as the log of running products renormalised beyond 1e+-150 (a log every few hundred samples instead of one
    each; Var_i >= sigma^2 >= 1e-10 and below 1e150 keep the products finite)."""
    n = s.shape[0]
    has_vs = slip_var.shape[0] == n
    has_vm = mu_var.shape[0] == n
    has_lat = lat.shape[0] == n
    if not (has_vs or has_vm or has_lat):
        return 0.5 * n * (_LOG_2PI + math.log(sigma2)) + 0.5 * sse(s, mu, theta) / sigma2
    r2v, var = _eiv_rows(s, mu, theta, sigma2, slip_var, mu_var, lat, work)
    acc = 0.0
    log_var = 0.0
    prod = 1.0
    for i in range(n):
        acc += r2v[i]
        prod *= var[i]
        if not 1e-150 < prod < 1e150:   # one log per run of variances whose product stays well inside doubles
            log_var += math.log(prod)
            prod = 1.0
    return 0.5 * (n * _LOG_2PI + acc + log_var + math.log(prod))


@njit(cache=True, nogil=True, inline="always")
def _eiv_rows(s, mu, theta, sigma2, slip_var, mu_var, lat, work) -> tuple[np.ndarray, np.ndarray]:
    """(r_i^2 / Var_i, Var_i) of every row into ``work`` rows 0 and 1 (:func:`_eiv_terms`, or
    :func:`_eiv_terms_lat` with lateral slips); absent variances (length 0) read work row 2's zeros."""
    n = s.shape[0]
    vs = slip_var if slip_var.shape[0] == n else work[2, :n]
    vm = mu_var if mu_var.shape[0] == n else work[2, :n]
    r2v, var = work[0, :n], work[1, :n]
    if lat.shape[0] == n:
        _eiv_terms_lat(s, mu, theta, sigma2, vs, vm, lat, r2v, var)
    else:
        _eiv_terms(s, mu, theta, sigma2, vs, vm, r2v, var)
    return r2v, var


@njit(cache=True, nogil=True)
def likelihood_work(n: int, k: int) -> np.ndarray:
    """The work space of :func:`gauss_nll_shared_into` (and :func:`gauss_nll_lat_into`) for ``n`` samples and
    ``k`` shared errors: zeros [5 + k, max(n, k)]; rows 0-3 per sample (row 2 stays zero), rows 4 .. 3 + k the
    k x k system, row 4 + k its right-hand side. Allocate once per chain, not per evaluation."""
    return np.zeros((5 + k, max(n, k)))


@njit(cache=True, nogil=True, error_model="numpy")
def gauss_nll_shared_into(s: np.ndarray, mu: np.ndarray, theta: np.ndarray, sigma2: float, slip_var: np.ndarray,
                          mu_var: np.ndarray, lat: np.ndarray, shared: np.ndarray, work: np.ndarray) -> float:
    """:func:`gauss_nll_lat_into` when the slips also share errors: slip_i = t_i + sum_k shared[k, i] delta_k +
    e_i with delta_k ~ N(0, 1) common to all samples (e.g. the error of a deconvolved slip component's mean,
    :meth:`~vehcal_ros.estimation.grip.latent_slip.SlipMixture.shared_loadings`), linearised as the per-sample slip
    variance is: mu ~ N(f(s), D + L L^T), D = diag(Var_i), L_ik = f'(s_i) shared[k, i]. By the Woodbury identity
    and the matrix determinant lemma, with M = I + L^T D^-1 L [K, K] and y = L^T D^-1 r:
    -log p = (n log 2 pi + sum r_i^2 / Var_i - y^T M^-1 y + sum log Var_i + log det M) / 2, O(n K^2).
    ``shared`` [K, n]; K = 0: :func:`gauss_nll_lat_into`. ``work``: :func:`likelihood_work` (row 2 zeros)."""
    K = shared.shape[0]
    if K == 0:
        return gauss_nll_lat_into(s, mu, theta, sigma2, slip_var, mu_var, lat, work)
    n = s.shape[0]
    vs = slip_var if slip_var.shape[0] == n else work[2, :n]
    vm = mu_var if mu_var.shape[0] == n else work[2, :n]
    la = lat if lat.shape[0] == n else work[2, :n]
    r, var, sl = work[0, :n], work[1, :n], work[3, :n]
    _eiv_residuals(s, mu, theta, sigma2, vs, vm, la, r, sl, var)
    M = work[4:4 + K, :K]
    y = work[4 + K, :K]
    M[:, :] = 0.0
    y[:] = 0.0
    acc = 0.0
    log_var = 0.0
    prod = 1.0
    for i in range(n):
        iv = 1.0 / var[i]
        acc += r[i] * r[i] * iv
        prod *= var[i]
        if not 1e-150 < prod < 1e150:
            log_var += math.log(prod)
            prod = 1.0
        for k in range(K):
            lk = sl[i] * shared[k, i] * iv
            y[k] += lk * r[i]
            for j in range(k + 1):
                M[k, j] += lk * sl[i] * shared[j, i]
    log_det = 0.0
    for k in range(K):          # Cholesky of M = I + L^T D^-1 L in place (lower), then forward solve for y
        M[k, k] += 1.0
        for j in range(k + 1):
            a = M[k, j]
            for m in range(j):
                a -= M[k, m] * M[j, m]
            if j == k:
                a = math.sqrt(a)
                log_det += 2.0 * math.log(a)
            else:
                a /= M[j, j]
            M[k, j] = a
    for k in range(K):
        a = y[k]
        for m in range(k):
            a -= M[k, m] * y[m]
        y[k] = a / M[k, k]
        acc -= y[k] * y[k]
    return 0.5 * (n * _LOG_2PI + acc + log_var + math.log(prod) + log_det)


NO_GROUPS = np.zeros((2, 0))
"""``groups`` of :func:`gauss_nll_groups_into` when every row is a sample of its own."""


@njit(cache=True, nogil=True)
def gauss_nll_groups(s: np.ndarray, mu: np.ndarray, theta: np.ndarray, sigma2: float, slip_var: np.ndarray,
                     mu_var: np.ndarray, lat: np.ndarray, shared: np.ndarray, groups: np.ndarray) -> float:
    """:func:`gauss_nll_groups_into` with its own work space (tools, tests, the ML step)."""
    return gauss_nll_groups_into(s, mu, theta, sigma2, slip_var, mu_var, lat, shared, groups,
                                 likelihood_work(s.shape[0], shared.shape[0]))


@njit(cache=True, nogil=True, error_model="numpy")
def gauss_nll_groups_into(s: np.ndarray, mu: np.ndarray, theta: np.ndarray, sigma2: float, slip_var: np.ndarray,
                          mu_var: np.ndarray, lat: np.ndarray, shared: np.ndarray, groups: np.ndarray,
                          work: np.ndarray) -> float:
    """Negative log likelihood (nats) of samples whose true slip has a Gaussian-mixture posterior: each row j is
    one Gaussian slice of sample ``groups[1, j]``'s posterior (consecutive rows, one sample), with weight
    exp(``groups[0, j]``), mean slip ``s[j]`` and variance ``slip_var[j]``, the sample's friction ``mu[j]``,
    ``mu_var[j]`` and ``lat[j]`` repeated on its rows::

        -log p = -sum_i log sum_{j in i} w_j N(mu_j; f(s_j), sigma^2 + v_mu_j + f'(s_j)^2 v_s_j)

    the true slip integrated out slice by slice, the curve linearised only inside a slice (whose variance is at
    most the slip noise's; :mod:`~vehcal_ros.estimation.grip.latent_slip`). A sample whose posterior spans two
    clusters (a maneuver's first blocks, between cruise and the maneuver's cluster) keeps both
    modes instead of one Gaussian at their mean, whose spread f'^2 w would penalise the curve's slope there.
    ``groups`` [2, 0] (:data:`NO_GROUPS`): every row its own sample, :func:`gauss_nll_shared_into` with the
    errors ``shared`` the samples share (which needs one row per sample). ``work``: :func:`likelihood_work`."""
    n = s.shape[0]
    if groups.shape[1] != n:
        return gauss_nll_shared_into(s, mu, theta, sigma2, slip_var, mu_var, lat, shared, work)
    r2v, var = _eiv_rows(s, mu, theta, sigma2, slip_var, mu_var, lat, work)
    acc = 0.0
    log_var = 0.0
    prod = 1.0
    n_samples = 0
    j = 0
    while j < n:
        k = j + 1
        while k < n and groups[1, k] == groups[1, j]:
            k += 1
        n_samples += 1
        if k == j + 1:       # a one-component posterior (weight 1): the running-product form of the log variance
            acc += r2v[j] - 2.0 * groups[0, j]
            prod *= var[j]
            if not 1e-150 < prod < 1e150:
                log_var += math.log(prod)
                prod = 1.0
        else:                # log sum_j w_j N_j by log-sum-exp over the sample's components
            top = -math.inf
            for q in range(j, k):
                r2v[q] = groups[0, q] - 0.5 * (math.log(var[q]) + r2v[q])
                top = max(top, r2v[q])
            tot = 0.0
            for q in range(j, k):
                tot += math.exp(r2v[q] - top)
            acc -= 2.0 * (top + math.log(tot))
        j = k
    return 0.5 * (n_samples * _LOG_2PI + acc + log_var + math.log(prod))


@njit(cache=True, nogil=True, error_model="numpy")
def _eiv_residuals(s, mu, theta, sigma2, vs, vm, lat, r, sl, var) -> None:
    """Per sample: the residual mu_i - f(s_i) into ``r``, the slope f'(s_i) into ``sl`` and Var_i into ``var``
    (:func:`_eiv_terms_lat`; lat_i = 0 is pure slip)."""
    B, C, D, E, sh, sv = theta[0], theta[1], theta[2], theta[3], theta[4], theta[5]
    peak_value = max(D + sv, 1e-6)
    for i in range(s.shape[0]):
        f, d = mf_and_slope(s[i], B, C, D, E, sh)
        f, d = combined(s[i], f + sv, d, lat[i] / peak_value)
        r[i] = mu[i] - f
        sl[i] = d
        var[i] = sigma2 + vm[i] + d * d * vs[i]


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def mf_and_slope(x: float, B: float, C: float, D: float, E: float, sh: float) -> tuple[float, float]:
    """(D sin g, f'(x)) of the magic formula (Eq. 5) without s_v, g = C atan(phi), in the vectorisable arctan
    and sin/cos of :mod:`vector_math` (inlined: the likelihood's per-sample loop, the chains' slope coordinates)."""
    u = B * (x + sh)
    phi = u - E * (u - vm_atan(u))
    sg, cg = vm_sincos(C * vm_atan(phi))
    return D * sg, D * cg * C / (1.0 + phi * phi) * ((1.0 - E) + E / (1.0 + u * u)) * B


@njit(cache=True, nogil=True, error_model="numpy")
def _eiv_terms(s, mu, theta, sigma2, vs, vm, r2v, var) -> None:
    """Per sample of pure slip: r_i^2 / Var_i into ``r2v``, Var_i = sigma^2 + v_mu_i + f'(s_i)^2 v_s_i into ``var``."""
    B, C, D, E, sh, sv = theta[0], theta[1], theta[2], theta[3], theta[4], theta[5]
    for i in range(s.shape[0]):
        f, sl = mf_and_slope(s[i], B, C, D, E, sh)
        r = mu[i] - f - sv
        v = sigma2 + vm[i] + sl * sl * vs[i]
        r2v[i] = r * r / v
        var[i] = v


@njit(cache=True, nogil=True, error_model="numpy")
def _eiv_terms_lat(s, mu, theta, sigma2, vs, vm, lat, r2v, var) -> None:
    """:func:`_eiv_terms` under the friction ellipse (:func:`combined`) where lat_i > 0."""
    B, C, D, E, sh, sv = theta[0], theta[1], theta[2], theta[3], theta[4], theta[5]
    peak_value = max(D + sv, 1e-6)   # the curve's maximum (C > 1): mu_x,max of the ellipse, mu_y,max = rho times it
    for i in range(s.shape[0]):
        f, sl = mf_and_slope(s[i], B, C, D, E, sh)
        f, sl = combined(s[i], f + sv, sl, lat[i] / peak_value)
        r = mu[i] - f
        v = sigma2 + vm[i] + sl * sl * vs[i]
        r2v[i] = r * r / v
        var[i] = v


@njit(cache=True, nogil=True)
def slope(s: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """d f(s_i, theta) / d s (-), the curve's slope at each slip."""
    out = np.empty(s.shape[0])
    B, C, D, E, sh = theta[0], theta[1], theta[2], theta[3], theta[4]
    for i in range(s.shape[0]):
        u = B * (s[i] + sh)
        phi = u - E * (u - math.atan(u))
        out[i] = D * math.cos(C * math.atan(phi)) * C / (1.0 + phi * phi) * ((1.0 - E) + E / (1.0 + u * u)) * B
    return out


@njit(cache=True, nogil=True)
def residuals(s: np.ndarray, mu: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """Residuals ``f(s_i, theta) - mu_i`` (the sign scipy's least_squares expects with the Jacobian below)."""
    return mf_curve(s, theta) - mu


@njit(cache=True, nogil=True)
def jacobian(s: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """Analytic Jacobian F[N, 6] = d f(s_i, theta) / d theta_j (friction paper, Eq. 16).

    With u = B x, phi = (1-E) u + E atan(u), g = C atan(phi), k = D cos(g) C / (1 + phi^2):
    df/dB = k phi'(u) x, df/dC = D cos(g) atan(phi), df/dD = sin(g), df/dE = -k (u - atan(u)),
    df/ds_h = k phi'(u) B, df/ds_v = 1.
    """
    n = s.shape[0]
    F = np.empty((n, N_THETA))
    B, C, D, E, sh = theta[0], theta[1], theta[2], theta[3], theta[4]
    for i in range(n):
        x = s[i] + sh
        u = B * x
        at_u = math.atan(u)
        phi = u - E * (u - at_u)
        at_phi = math.atan(phi)
        g = C * at_phi
        cg = math.cos(g)
        k = D * cg * C / (1.0 + phi * phi)
        dphi_du = (1.0 - E) + E / (1.0 + u * u)
        F[i, 0] = k * dphi_du * x
        F[i, 1] = D * cg * at_phi
        F[i, 2] = math.sin(g)
        F[i, 3] = -k * (u - at_u)
        F[i, 4] = k * dphi_du * B
        F[i, 5] = 1.0
    return F


@njit(cache=True, nogil=True)
def _solve_phi(target: float, E: float) -> float:
    """u >= 0 with (1-E) u + E atan(u) = target > 0, for E <= 1 (phi strictly increasing); safeguarded Newton."""
    lo = 0.0
    if E <= 0.0:
        hi = target  # phi(u) >= u
    elif E < 1.0:
        hi = target / (1.0 - E)  # phi(u) >= (1-E) u
    else:
        # E == 1: phi = atan(u); callers guarantee target < pi/2
        hi = math.tan(min(target, 1.5707963)) + 1.0
    u = 0.5 * (lo + hi)
    for _ in range(100):
        h = (1.0 - E) * u + E * math.atan(u) - target
        if h > 0.0:
            hi = u
        else:
            lo = u
        dh = (1.0 - E) + E / (1.0 + u * u)
        un = u - h / dh
        if not (un > lo and un < hi):
            un = 0.5 * (lo + hi)
        if abs(un - u) <= 1e-14 * (1.0 + abs(u)):
            return un
        u = un
    return u


@njit(cache=True, nogil=True)
def peak(theta: np.ndarray) -> tuple[float, float]:
    """(mu_max, slip at the maximum) of the curve over s in [0, S_DOMAIN_MAX] (see the module docstring)."""
    B, C, D, E, sh, sv = theta[0], theta[1], theta[2], theta[3], theta[4], theta[5]
    if E <= 1.0 and B > 0.0 and D > 0.0 and C < 3.0:
        if C > 1.0:
            phi_star = math.tan(0.5 * math.pi / C)
            if E == 1.0 and phi_star >= 0.5 * math.pi:
                s_star = math.inf
            else:
                s_star = _solve_phi(phi_star, E) / B - sh
            if s_star > S_DOMAIN_MAX:
                return mf(S_DOMAIN_MAX, B, C, D, E, sh, sv), S_DOMAIN_MAX
            if s_star < 0.0:
                return mf(0.0, B, C, D, E, sh, sv), 0.0
            return D + sv, s_star
        return mf(S_DOMAIN_MAX, B, C, D, E, sh, sv), S_DOMAIN_MAX
    best = -math.inf
    s_best = 0.0
    for j in range(_GRID_N):
        sj = S_DOMAIN_MAX * j / (_GRID_N - 1)
        v = mf(sj, B, C, D, E, sh, sv)
        if v > best:
            best = v
            s_best = sj
    return best, s_best


@njit(cache=True, nogil=True)
def peak_slip_at_most(theta: np.ndarray, s_max: float) -> bool:
    """True when the slip at the curve maximum is <= ``s_max`` (0 < s_max < S_DOMAIN_MAX), without a root find.

    For C in (1, 3), E <= 1, B, D > 0, g(s) = C atan(phi(B (s + s_h))) increases with s and the peak is where
    g = pi/2, so "peak slip <= s_max" is exactly "g(s_max) >= pi/2". This is the truncated physical prior of
    the friction paper, Section 4.2.2, evaluated in O(1) per proposal.
    """
    B, C, E, sh = theta[0], theta[1], theta[3], theta[4]
    if E <= 1.0 and B > 0.0 and theta[2] > 0.0 and C < 3.0:
        if C <= 1.0:
            return False
        u = B * (s_max + sh)
        phi = u - E * (u - vm_atan(u))
        return C * vm_atan(phi) >= 0.5 * math.pi
    return peak(theta)[1] <= s_max


@njit(cache=True, nogil=True, parallel=True)
def mf_batch(s: np.ndarray, thetas: np.ndarray) -> np.ndarray:
    """Curves ``mu[n, N]`` for ``thetas[n, 6]`` at slips ``s[N]`` (Eq. 5, Eq. 26 without the average)."""
    n = thetas.shape[0]
    out = np.empty((n, s.shape[0]))
    for k in prange(n):
        B, C, D, E, sh, sv = thetas[k, 0], thetas[k, 1], thetas[k, 2], thetas[k, 3], thetas[k, 4], thetas[k, 5]
        for i in range(s.shape[0]):
            out[k, i] = mf(s[i], B, C, D, E, sh, sv)
    return out


@njit(cache=True, nogil=True, parallel=True)
def peak_batch(thetas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mu_max[n], slip_at_peak[n]) for ``thetas[n, 6]`` (Algorithm 1, step 15, per draw)."""
    n = thetas.shape[0]
    mu_max = np.empty(n)
    s_peak = np.empty(n)
    for k in prange(n):
        m, sp = peak(thetas[k])
        mu_max[k] = m
        s_peak[k] = sp
    return mu_max, s_peak


@njit(cache=True, nogil=True, parallel=True)
def sse_batch(s: np.ndarray, mu: np.ndarray, thetas: np.ndarray) -> np.ndarray:
    """V(theta) (Eq. 14) for each row of ``thetas[n, 6]``."""
    n = thetas.shape[0]
    out = np.empty(n)
    for k in prange(n):
        out[k] = sse(s, mu, thetas[k])
    return out


def slip_at_friction(theta: np.ndarray, mu_level: float) -> float:
    """Smallest slip in [0, slip at peak] where the curve reaches ``mu_level`` (rising branch), by bisection.

    Used to build the paper's training sets "mu <= limit" (Section 4.1). Raises ValueError when the level is
    not reached on the rising branch.
    """
    theta = np.asarray(theta, dtype=float)
    mu_max, s_pk = peak(theta)
    f0 = mf(0.0, *theta)
    if not (f0 <= mu_level <= mu_max):
        raise ValueError(f"friction level {mu_level} outside the rising branch [{f0:.4g}, {mu_max:.4g}]")
    lo, hi = 0.0, float(s_pk)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mf(mid, *theta) < mu_level:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)
