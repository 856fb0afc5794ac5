"""The grip belief in force: what a planner may assume about the road under the wheels NOW.

A fit (:mod:`~vehcal_ros.estimation.grip.fit`) describes the road under the samples it was given; the road under
the wheels at a later time t may have changed since. The belief in force at t is the mixture

    p(mu_max at t) = (1 - p_c) p(mu_max | fit) + p_c p_0(mu_max),

p(mu_max | fit) the published posterior, p_0 the road-friction prior (uniform on ``[prior_lower, prior_upper]``,
the range of dry asphalt down to packed snow and ice) and p_c the probability that the surface changed since the
fit's data. Road changes are modelled as a Poisson process in distance and in time (a hazard model):

    p_c = 1 - exp(-(d / L_d + a / T_a)),

d the distance travelled and a the time elapsed since the newest sample of the fit's data, L_d the mean road
length between friction changes and T_a the mean time between weather changes. Their defaults are a design
assumption, fixed before any evaluation and not fitted to the project's drives: one change of the friction
class per ``change_distance`` = 2 km of road (a wet patch, a bridge deck, a change of pavement) and per
``change_time`` = 30 min of driving (rain starting, temperature crossing zero). With them the 90 % interval of
an estimate stays that of the fit for the first ~100 m and then widens continuously toward the prior.

The published interval is the equal-tailed ``prob`` interval of that mixture (its quantiles by bisection on the
mixture CDF); the posterior's CDF is two half normals joined at its mean, through its interval ends (so with
p_c = 0 the published interval is the fit's). When p_c exceeds ``unknown_above`` or no estimate exists, the belief
is *unknown*: mean NaN, lower bound 0 (a planner may assume no grip), upper bound ``prior_upper``.

That is the belief with nothing seen since the fit's data. The samples since (watched by
:meth:`BeliefTracker.observe` at the node's belief cadence, and every 0.5 s of data time by :func:`belief_timeline`)
prove that the road under them offered at least their floor; a change in the interval between two observations
would have put every later sample on the new road. So the change branch is split by change time: interval j (from
the previous observation, or the fit's data, to observation j) has the hazard weight
w_j = exp(-Lambda_{j-1}) - exp(-Lambda_j) (Lambda = d / L_d + a / T_a at each end) and, for its new road, the
prior truncated below at F_j, the largest floor observed after it; the no-change branch, exp(-Lambda(t)), is the
fit's posterior truncated below at F_0, the largest floor since the fit's data. Normalised, the weights give the
posterior p_c (lower as the samples prove friction: proven grip rules out the slippery roads a change might have
led to); the mean and upper end are this mixture's. The lower end is the larger of the unconditioned mixture's
above and the same quantile with each changed road's weight put at its floor (:meth:`BeliefTracker._robust_lower`),
a bound that holds whatever the roads above a floor are like. The belief is unknown when the posterior p_c and the
hazard-aged one both exceed ``unknown_above`` and nothing beyond ``prior_lower`` is proven since (watching never
makes a belief unknown sooner); a floor belief whose floor the samples since exceed becomes the floor belief of
theirs (docs/grip.md, "What the samples since prove").

A contradiction withdraws the estimate at once (p_c = 1) until the next fit or floor, and puts in its place the
floor belief the contradicting samples prove (:meth:`BeliefTracker.contradiction_floor`: those from the first
sample that alone contradicts the lower bound on; unknown when none of them shows friction beyond its noise).
Every ``period`` (0.5 s) of data time, the newest ``window`` (1 s) of friction samples is tested against the
*lower-bound curve*, the fitted curve scaled so that its peak is the lower bound l in force, f_l(s) = (l / m)
f(s). Every road whose grip lies in the interval gives at least about that much friction at a slip (its slip
stiffness is the tire's, so on the curve's linear part f_l is below the data, and the test cannot fire there; a
sample at a slip angle takes the friction ellipse of that road, pacejka.combined); samples well below it show a
road that cannot offer l. Over the samples where f_l reaches half of l, with residuals r_i = |mu_i| - f_l(|s_i|),
the friction's own noise a_i (the sample's stated variance and the fit's sigma^2, independent per sample) and a
slip error e common to the window (the speed reference's and the rolling radius's error: variance v = the
samples' mean slip variance + ``shared_slip_sd``^2, which moves every residual by f_l'(s_i) e), the generalised
least-squares statistic T = sum(r_i / a_i) / sqrt(sum(1 / a_i) + v (sum f_l'(s_i) / a_i)^2) is standard normal
on the road in force, and the test fires when T < -``z_crit`` (3.5: one-sided 2.3e-4 per test under the model,
0.28 false withdrawals per 10 minutes of constant road at two tests a second).
:func:`contradicts` is a pure function of the estimate, the lower bound and the samples, so the live node and a
replay (which rebuilds the belief afterwards from its record, :func:`belief_timeline`) withdraw at the same data
times.

A *floor belief* stands in where no curve is identified (a window below the excitation gate): the road under a
sample that transmitted friction |mu_i| offers at least that much, so the data's floor f (the largest
``|mu_i| - z sd_i``, z Bonferroni over the window's samples: grip_pipeline.observed_floor) bounds mu_max from
below. Its posterior is the road-friction prior truncated below at f: interval [f, f + prob (prior_upper - f)]
(all of its probability above f; the upper end its ``prob`` quantile), mean (f + prior_upper) / 2
(:func:`floor_mu_max`). It ages by the same hazard, carries no curve (so no contradiction test) and replaces the
belief in force only where it raises the lower bound then (grip_pipeline.GripPipeline.offer_floor).

Nothing here imports rclpy; the trackers hold a few floats per scope and the odometer a preallocated trace.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Any

import numpy as np

from vehcal_ros.estimation.grip.fit import GripEstimate, MuMax
from vehcal_ros.estimation.sensing.buffers import RollingBuffer
from vehcal_ros.inference.quantiles import normal_quantile
from vehcal_ros.models import pacejka


@dataclass(frozen=True)
class HazardModel:
    """Road-change hazard and the belief it implies (module docstring). Lengths in m, times in s."""

    change_distance: float = 2000.0   #: L_d, mean road length between friction changes, m (design assumption)
    change_time: float = 1800.0       #: T_a, mean time between weather changes, s (design assumption)
    prior_lower: float = 0.1          #: road-friction prior, lower end (packed snow / ice), -
    prior_upper: float = 1.2          #: road-friction prior, upper end (dry asphalt, summer tire), -
    unknown_above: float = 0.5        #: p_c above which the belief is published as unknown

    def validate(self) -> None:
        """Raise ValueError naming the parameter and its range."""
        if not 1.0 <= self.change_distance <= 1e7:
            raise ValueError(f"hazard_change_distance must be in [1, 1e7] m, got {self.change_distance}")
        if not 1.0 <= self.change_time <= 1e7:
            raise ValueError(f"hazard_change_time must be in [1, 1e7] s, got {self.change_time}")
        if not 0.0 <= self.prior_lower < self.prior_upper <= 5.0:
            raise ValueError(f"grip prior range must satisfy 0 <= lower < upper <= 5, got "
                             f"[{self.prior_lower}, {self.prior_upper}]")
        if not 0.0 < self.unknown_above <= 1.0:
            raise ValueError(f"unknown_above must be in (0, 1], got {self.unknown_above}")

    def p_change(self, distance: float, age: float) -> float:
        """Probability that the surface changed within ``distance`` m and ``age`` s (Poisson hazard)."""
        rate = max(distance, 0.0) / self.change_distance + max(age, 0.0) / self.change_time
        return -math.expm1(-rate)


@dataclass(frozen=True)
class ContradictionTest:
    """The contradiction test of the module docstring (times in s, data time)."""

    period: float = 0.5      #: s between tests
    window: float = 1.0      #: s of newest samples tested
    z_crit: float = 3.5      #: one-sided threshold of sqrt(n) mean(z)
    min_samples: int = 3     #: fewer informative samples: no test
    min_level: float = 0.5   #: a sample informs where the lower-bound curve reaches this fraction of l
    #: relative sd of a slip error common to the window's samples beyond their stated slip variance (the rolling
    #: radius's: grip_pipeline.GripPipeline sets its ``max_radius_sd``)
    shared_slip_sd: float = 0.0

    def validate(self) -> None:
        if not (0.01 <= self.period <= 60.0 and 0.05 <= self.window <= 60.0 and self.z_crit > 0.0
                and self.min_samples >= 1 and 0.0 <= self.min_level < 1.0 and 0.0 <= self.shared_slip_sd < 0.1):
            raise ValueError(f"contradiction test settings out of range: {self}")


def contradiction_scores(est: GripEstimate, lower: float, slip: np.ndarray, mu: np.ndarray,
                         slip_var: np.ndarray | None, mu_var: np.ndarray | None, lat: np.ndarray | None,
                         test: ContradictionTest) -> tuple[np.ndarray, np.ndarray, float] | None:
    """(indices of the informative samples, their z_i, the statistic T) of the contradiction test (module
    docstring) of the samples against a lower bound ``lower`` of the estimate ``est``; None when the test does
    not apply (no lower bound, no curve, fewer than ``test.min_samples`` informative samples)."""
    if not (lower > 0.0 and est.mu_max_mean > 0.0) or slip.size == 0:
        return None
    theta = np.array([est.theta[k] for k in pacejka.THETA_NAMES], dtype=float)
    if not np.all(np.isfinite(theta)):
        return None
    scale = lower / est.mu_max_mean
    a = np.ascontiguousarray(np.abs(slip), dtype=float)
    f = scale * np.abs(pacejka.mf_curve(a, theta))
    df = scale * np.abs(pacejka.slope(a, theta))
    if lat is not None:   # at a slip angle: the friction ellipse of a road whose peak is the lower bound
        for i in np.flatnonzero(np.asarray(lat) > 0.0):
            f[i], df[i] = pacejka.combined(float(a[i]), float(f[i]), float(df[i]), float(lat[i]) / lower)
    inform = np.flatnonzero(f >= test.min_level * lower)
    n = int(inform.size)
    if n < test.min_samples:
        return None
    var = np.full(n, float(est.sigma) ** 2)            # the friction's own noise: independent per sample
    if mu_var is not None:
        var = var + np.asarray(mu_var)[inform]
    var = np.maximum(var, 1e-12)
    # the slip's error (the speed reference's and the rolling radius's) is common to a second of samples
    shared = test.shared_slip_sd ** 2 + (float(np.mean(np.asarray(slip_var)[inform])) if slip_var is not None
                                         else 0.0)
    d = df[inform]
    r = np.abs(np.asarray(mu)[inform]) - f[inform]
    z = r / np.sqrt(var + d * d * shared)
    w = 1.0 / var
    stat = float(np.sum(w * r)) / math.sqrt(float(np.sum(w)) + shared * float(np.sum(w * d)) ** 2)
    return inform, z, stat


def contradicts(est: GripEstimate, lower: float, t: np.ndarray, slip: np.ndarray, mu: np.ndarray,
                slip_var: np.ndarray | None, mu_var: np.ndarray | None, lat: np.ndarray | None,
                test: ContradictionTest) -> bool:
    """True when the samples (one scope's newest ``test.window``, any order) contradict a lower bound ``lower``
    of the estimate ``est`` in force (module docstring): T < -``test.z_crit``."""
    scores = contradiction_scores(est, lower, slip, mu, slip_var, mu_var, lat, test)
    return scores is not None and scores[2] < -test.z_crit


def sample_floors(data: Any, sigma: float, level: float = 0.01, since: float = -math.inf,
                  family: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(t_i, ``|mu_i| - z sd_i``) of the samples stamped at or after ``since`` (the last road change: older
    samples kept for their shared low-slip curve were taken on the previous road), with
    ``sd_i = sqrt(v_mu_i + sigma^2)`` (the sample's stated friction variance and the noise std ``sigma``) and
    ``z`` the one-sided normal quantile at ``level / n`` (Bonferroni over the n samples, or over ``family`` when
    given): the road under every sample offered at least its value, all of them together unless a false alarm
    of probability ``level``. Non-finite values are dropped."""
    t = np.asarray(data.t, dtype=float)
    recent = t >= since
    n = int(recent.sum())
    if n == 0:
        return np.empty(0), np.empty(0)
    var = getattr(data, "mu_var", None)
    var = np.zeros(n) if var is None else np.nan_to_num(np.asarray(var, dtype=float)[recent], nan=np.inf)
    z = -normal_quantile(level / (family or n))
    floor = np.abs(np.asarray(data.mu, dtype=float)[recent]) - z * np.sqrt(var + float(sigma) ** 2)
    ok = np.isfinite(floor)
    return t[recent][ok], floor[ok]


def noise_sd(mu: np.ndarray) -> float:
    """Robust noise standard deviation of a friction series from its successive differences:
    1.4826 median |diff| / sqrt(2) (the signal changes little between 0.1 s blocks); 0 for fewer than 3."""
    mu = np.abs(np.asarray(mu, dtype=float))
    mu = mu[np.isfinite(mu)]
    if mu.size < 3:
        return 0.0
    return float(1.4826 * np.median(np.abs(np.diff(mu))) / math.sqrt(2.0))


def floor_mu_max(floor: float, hazard: HazardModel, prob: float) -> MuMax:
    """The floor belief's mu_max (module docstring): the road-friction prior of ``hazard`` truncated below at
    ``floor``; its interval [floor, floor + prob (prior_upper - floor)]."""
    hi = hazard.prior_upper
    f = min(max(float(floor), 0.0), hi)
    return MuMax(mean=0.5 * (f + hi), std=(hi - f) / math.sqrt(12.0), lower=f, upper=f + prob * (hi - f),
                 prob=prob)


@dataclass(frozen=True)
class Belief:
    """The grip belief in force at time ``t`` (friction, dimensionless; module docstring)."""

    t: float                 #: time the belief refers to, s (the data clock)
    mean: float              #: mixture mean of mu_max; NaN when unknown
    lower: float             #: lower end of the equal-tailed interval; 0 when unknown
    upper: float             #: upper end; ``prior_upper`` when unknown
    age: float               #: s since the newest sample of the estimate's data; inf without an estimate
    distance: float          #: m travelled since then; inf without an estimate
    p_change: float          #: probability the surface changed since the estimate's data (given the floors since)
    known: bool              #: False: unknown (no estimate, withdrawn, or p_change > unknown_above)
    floor: bool = False      #: True: a floor belief (no curve identified; module docstring)


def _norm_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def _norm_ppf(p: float) -> float:
    """Standard normal quantile by bisection on the CDF (to ~1e-12; computed once per tracker)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"probability must be in (0, 1), got {p}")
    lo, hi = -10.0, 10.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if _norm_cdf(mid) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


class Odometer:
    """Distance travelled, m: the vehicle speed integrated over the data clock (trapezoidal; a stamp going back or
    a gap over ``max_gap`` s integrates nothing across it; a clock that goes back by more than ``max_gap`` starts
    a new time base and keeps the distance), with a trace of (t, distance) every ``period`` s over
    the last ``n`` entries (preallocated) so the distance at an earlier time can be read back."""

    def __init__(self, period: float = 0.1, n: int = 6000, max_gap: float = 1.0) -> None:
        self.period, self.max_gap = period, max_gap
        self.value = 0.0
        self._t = math.nan
        self._u = 0.0
        self._trace_t = np.full(n, np.nan)
        self._trace_d = np.zeros(n)
        self._k = 0                    # entries written

    @property
    def t(self) -> float:
        """Stamp of the newest speed sample, s (NaN before the first; follows a clock that went back)."""
        return self._t

    def add_speed(self, t: float, u: float) -> None:
        """One speed sample ``u`` (m/s) at ``t`` (s)."""
        if not (math.isfinite(t) and math.isfinite(u)):
            return
        if math.isnan(self._t):
            self._t, self._u = t, u
            self._record(t)
            return
        dt = t - self._t
        if dt < -self.max_gap:   # the clock went back (a restarted simulator or bag): a new time base, same value
            self._t, self._u = t, u
            self._trace_t[:] = np.nan
            self._k = 0
            self._record(t)
            return
        if dt <= 0.0:
            return
        if dt <= self.max_gap:
            self.value += 0.5 * (abs(u) + abs(self._u)) * dt
        self._t, self._u = t, u
        last = self._trace_t[(self._k - 1) % self._trace_t.size]
        if not t - last < self.period:
            self._record(t)

    def _record(self, t: float) -> None:
        i = self._k % self._trace_t.size
        self._trace_t[i], self._trace_d[i] = t, self.value
        self._k += 1

    def at(self, t: float) -> float:
        """The distance at ``t``: interpolated in the trace, the current value at or after the newest sample, the
        oldest kept value before the trace."""
        if math.isnan(self._t) or not math.isfinite(t) or t >= self._t:
            return self.value
        n = min(self._k, self._trace_t.size)
        start = self._k - n
        order = (np.arange(start, self._k) % self._trace_t.size)
        return float(np.interp(t, self._trace_t[order], self._trace_d[order]))


#: Friction samples a belief can watch in its life: one axle gives 20 a second (two wheels, 0.1 s blocks), and at
#: the slowest driving speed, 3 m/s, the default hazard reaches ``unknown_above`` = 0.5 after 1386 m = 462 s, i.e.
#: 9240 samples. The watched floors' z is Bonferroni over this many (:meth:`BeliefTracker.observe`).
FLOOR_FAMILY = 10_000


class BeliefTracker:
    """Per scope: the last published estimate and the belief in force (:meth:`belief`). Shares the vehicle's
    :class:`Odometer`; :meth:`set_estimate` takes each published estimate, :meth:`withdraw` a contradiction."""

    def __init__(self, hazard: HazardModel | None = None, prob: float = 0.9,
                 odometer: Odometer | None = None) -> None:
        self.hazard = hazard or HazardModel()
        self.hazard.validate()
        if not 0.5 <= prob < 1.0:
            raise ValueError(f"interval_prob must be in [0.5, 1), got {prob}")
        self.prob = prob
        self._z = _norm_ppf(0.5 + 0.5 * prob)
        self.odometer = odometer if odometer is not None else Odometer()
        self.estimate: MuMax | None = None
        self.fit: GripEstimate | None = None   #: the estimate in force, whole (the contradiction test's curve)
        self.t_data = math.nan       #: newest sample time of the estimate's data, s
        self.odo_data = math.nan     #: distance at that time, m
        self.withdrawn = False
        self.floor = False           #: the estimate in force is a floor belief (module docstring)
        #: after a withdrawal: (mu_max, t_data, distance) of the floor belief the contradicting samples prove
        self.fallback: tuple[MuMax, float, float] | None = None
        #: the floor each observation's samples prove (:meth:`observe`), stamped with their newest time, and the
        #: distance then: a preallocated ring over the last 4096 observations
        self.watched = RollingBuffer(("distance", "floor"), capacity=4096)
        self.observed_to = -math.inf   #: newest sample time :meth:`observe` has seen, s
        self.sigma = math.nan          #: noise std of the last fit, the watched floors' noise floor

    def set_estimate(self, mu_max: MuMax, t_data: float, fit: GripEstimate | None = None,
                     floor: bool = False) -> None:
        """A newly published estimate (its mu_max posterior; ``fit``: the whole estimate, for the contradiction
        test; ``floor``: a floor belief) whose newest sample is at ``t_data`` s."""
        self.estimate = mu_max
        self.fit = fit
        if fit is not None and math.isfinite(fit.sigma):
            self.sigma = float(fit.sigma)
        self.t_data = t_data
        self.odo_data = self.odometer.at(t_data)
        self.withdrawn = False
        self.floor = floor
        self.fallback = None

    def withdraw(self, fallback: tuple[MuMax, float] | None = None) -> None:
        """New data contradict the estimate: it stops describing the road (p_c = 1) until the next one. In its
        place, ``fallback`` (a floor belief's mu_max and its data stamp, s) when given, else unknown."""
        self.withdrawn = True
        self.fallback = None if fallback is None else (fallback[0], fallback[1], self.odometer.at(fallback[1]))

    def reset(self) -> None:
        self.estimate, self.fit, self.t_data, self.odo_data, self.withdrawn = None, None, math.nan, math.nan, False
        self.floor = False
        self.fallback = None
        self.watched.clear()
        self.observed_to = -math.inf

    def observe(self, samples: Any) -> None:
        """Watch the friction ``samples`` (a ScopeData) stamped after those already seen: the floor they prove
        together, max_i(|mu_i| - z sd_i) (sd_i from the sample's stated variance and the larger of the last fit's
        sigma and their own noise, :func:`noise_sd`; z Bonferroni at 1 % over ``FLOOR_FAMILY`` samples), stamped
        with their newest time, for the change branch of :meth:`belief`. A clock that went back more than a
        second starts the record again."""
        t = np.asarray(samples.t, dtype=float)
        if t.size == 0:
            return
        if float(np.max(t)) < self.observed_to - 1.0:
            self.watched.clear()
            self.observed_to = -math.inf
        after = float(np.nextafter(self.observed_to, math.inf))   # stamped after those already seen
        new = t >= after
        if not np.any(new):
            return
        sigma = max(self.sigma if math.isfinite(self.sigma) else 0.0, noise_sd(np.asarray(samples.mu)[new]))
        f = sample_floors(samples, sigma, 0.01, after, family=FLOOR_FAMILY)[1]
        newest = float(np.max(t[new]))
        self.observed_to = newest
        self.watched.append(newest, (self.odometer.at(newest), max(float(np.max(f)), 0.0) if f.size else 0.0))

    def test(self, t: float, samples: Any, test: ContradictionTest) -> bool:
        """Run the contradiction test at ``t`` on ``samples`` (a ScopeData of the newest ``test.window``);
        withdraw and return True when it fires."""
        if self.fit is None or self.withdrawn:
            return False
        b = self.belief(t)
        if not b.known:
            return False
        scores = contradiction_scores(self.fit, b.lower, samples.slip, samples.mu, samples.slip_var,
                                      samples.mu_var, samples.lat, test)
        if scores is None:
            return False
        inform, z, stat = scores
        if not stat < -test.z_crit:
            return False
        bad = inform[z < -test.z_crit]
        since = float(np.min(np.asarray(samples.t)[bad])) if bad.size else math.inf
        self.withdraw(self.contradiction_floor(samples, since))
        return True

    def contradiction_floor(self, samples: Any, since: float, level: float = 0.01) -> tuple[MuMax, float] | None:
        """The floor belief (mu_max, data stamp) that contradicting ``samples`` prove: the largest
        :func:`sample_floors` value (noise std the withdrawn fit's sigma) of those stamped at or after ``since``
        (the first sample that alone contradicts the lower bound, z_i < -z_crit: the road had changed by then,
        and older samples of the window may be the old road's), stamped with its sample's time; None when none
        shows friction beyond its noise."""
        sigma = float(self.fit.sigma) if self.fit is not None and math.isfinite(self.fit.sigma) else 0.0
        t, f = sample_floors(samples, sigma, level, since)
        if f.size == 0 or not float(np.max(f)) > 0.0:
            return None
        i = int(np.argmax(f))
        return floor_mu_max(float(f[i]), self.hazard, self.prob), float(t[i])

    # ----------------------------------------------------------------- output
    def belief(self, t: float, kept: bool = False) -> Belief:
        """The belief in force at ``t`` (module docstring); ``kept``: as if the estimate had not been withdrawn
        and nothing had been watched since (the hazard-aged estimate alone)."""
        hz = self.hazard
        if self.estimate is None:
            return Belief(t, math.nan, 0.0, hz.prior_upper, math.inf, math.inf, 1.0, False)
        if self.withdrawn and not kept:
            if self.fallback is None:
                age = max(t - self.t_data, 0.0)
                distance = max(self.odometer.at(t) - self.odo_data, 0.0)
                return Belief(t, math.nan, 0.0, hz.prior_upper, age, distance, 1.0, False)
            return self._aged(t, *self.fallback, True, True)
        return self._aged(t, self.estimate, self.t_data, self.odo_data, self.floor, not kept)

    def _aged(self, t: float, m: MuMax, t_data: float, odo_data: float, floor: bool, watch: bool) -> Belief:
        """The belief at ``t`` of the estimate ``m`` (a floor belief when ``floor``) whose newest sample is at
        ``t_data`` (distance ``odo_data``): the mixture of the module docstring, conditioned on the floors watched
        since when ``watch``."""
        hz = self.hazard
        age = max(t - t_data, 0.0)
        distance = max(self.odometer.at(t) - odo_data, 0.0)
        rate = distance / hz.change_distance + age / hz.change_time
        if rate == 0.0:   # no time, no distance: the fit's own interval
            return Belief(t, m.mean, m.lower, m.upper, age, distance, 0.0, True, floor)
        tail = 0.5 * (1.0 - self.prob)
        stay = math.exp(-rate)                     # no change since the estimate's data
        w, p_floor, proven = self._change_branch(t, t_data, odo_data, rate, watch)
        if floor and proven > m.lower:             # a floor belief's road offers what was proven since: its floor
            m = floor_mu_max(proven, hz, self.prob)
        cut = self._post_cdf(m, proven) if not floor else 0.0   # a fit's road offers what was proven since
        keep = w * (1.0 - p_floor)                 # each change time's weight times P0(mu_max > its floor)
        norm_ = stay * (1.0 - cut) + float(np.sum(keep))
        p = float(np.sum(keep)) / norm_
        if p > hz.unknown_above and -math.expm1(-rate) > hz.unknown_above and not proven > hz.prior_lower:
            return Belief(t, math.nan, 0.0, hz.prior_upper, age, distance, p, False)
        lo_prior = hz.prior_lower + p_floor * (hz.prior_upper - hz.prior_lower)   # the truncated priors' lower ends
        mean = (stay * (1.0 - cut) * self._post_mean_above(m, -math.inf if floor else proven)
                + float(np.sum(keep * 0.5 * (lo_prior + hz.prior_upper)))) / norm_
        mix = self._mixture(stay, cut, w, p_floor, norm_)
        upper = self._quantile(m, 1.0 - tail, mix)
        if watch:   # the lower end also holds whatever the roads above the floors are like
            plain = self._mixture(stay, 0.0, np.array([1.0 - stay]), np.zeros(1), 1.0)
            lower = max(self._quantile(m, tail, plain),
                        self._robust_lower(m, tail, stay, cut, proven, keep, lo_prior, norm_, floor))
        else:       # the hazard-aged mixture itself
            lower = self._quantile(m, tail, mix)
        return Belief(t, mean, lower, upper, age, distance, p, True, floor)

    @staticmethod
    def _mixture(stay: float, cut: float, w: np.ndarray, p_floor: np.ndarray, norm_: float) -> tuple:
        """The mixture's terms for :meth:`_cdf`: the change branch's CDF is piecewise linear in P0(x),
        sum_j w_j max(P0(x) - P_j, 0), read with the P_j sorted and the cumulative sums of w_j and w_j P_j."""
        order = np.argsort(p_floor, kind="stable")
        ps = p_floor[order].tolist()
        cw = np.concatenate([[0.0], np.cumsum(w[order])]).tolist()
        cwp = np.concatenate([[0.0], np.cumsum(w[order] * p_floor[order])]).tolist()
        return stay, cut, ps, cw, cwp, norm_

    def _robust_lower(self, m: MuMax, q: float, stay: float, cut: float, proven: float, keep: np.ndarray,
                      lo_prior: np.ndarray, norm_: float, floor: bool) -> float:
        """The ``q`` quantile of the mixture with each changed road's probability at its floor (the lowest
        friction it may have) instead of spread over the prior above it, and a floor belief's at its floor or
        the floor proven since: a bound that does not rest on how the roads above a floor are distributed."""
        order = np.argsort(lo_prior, kind="stable")
        at = lo_prior[order].tolist()
        cum = np.concatenate([[0.0], np.cumsum(keep[order])]).tolist()
        base = max(m.lower, proven)
        lo, hi = self.hazard.prior_lower, max(m.upper, self.hazard.prior_upper)
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            if floor:
                own = stay * (1.0 - cut) * (mid >= base)
            else:
                own = stay * max(self._post_cdf(m, mid) - cut, 0.0)
            if (own + cum[bisect_right(at, mid)]) / norm_ < q:
                lo = mid
            else:
                hi = mid
        return 0.5 * (lo + hi)

    def _change_branch(self, t: float, t_data: float, odo_data: float, rate: float,
                       watch: bool) -> tuple[np.ndarray, np.ndarray, float]:
        """The change branch of the belief at ``t``: per interval between the watched floors since ``t_data``
        (the first from ``t_data``, the last to ``t``), the prior probability that the road changed in it,
        w_j = exp(-Lambda_{j-1}) - exp(-Lambda_j) (Lambda the hazard's integrated rate, ``rate`` at ``t``), and
        P_j = P0(F_j), the road-friction prior's CDF at the floor F_j that every observation after that interval
        proves (the largest of them; 0 without one): a road changed then is a road under those samples. Also
        the largest floor watched since ``t_data`` (-inf without one above 0; the first observation, whose samples
        may be older than ``t_data``, not counted), which bounds the estimate's own road if it has not changed."""
        hz = self.hazard
        if not watch:
            return np.array([-math.expm1(-rate)]), np.zeros(1), -math.inf
        rows = self.watched.since(t_data)
        rows = rows[(rows[:, 0] > t_data) & (rows[:, 0] <= t)]
        tb, db, fb = rows[:, 0], rows[:, 1], rows[:, 2]
        lam = np.minimum((np.maximum(db - odo_data, 0.0) / hz.change_distance
                          + (tb - t_data) / hz.change_time), rate)
        lam = np.concatenate([[0.0], np.maximum.accumulate(lam) if lam.size else lam, [rate]])
        surv = np.exp(-lam)
        w = surv[:-1] - surv[1:]
        suffix = np.maximum.accumulate(fb[::-1])[::-1] if fb.size else fb     # suffix[i] = max(f_i, ..., f_K)
        floors = np.concatenate([suffix[1:], [0.0, 0.0]])[: w.size]
        p_floor = np.clip((floors - hz.prior_lower) / (hz.prior_upper - hz.prior_lower), 0.0, 1.0)
        proven = float(suffix[1]) if suffix.size > 1 and suffix[1] > 0.0 else -math.inf   # the first may straddle
        return w, p_floor, proven

    def _post_cdf(self, m: MuMax, x: float) -> float:
        """CDF of the estimate's posterior: two half normals joined at its mean, through its interval ends
        (F(lower) = tail and F(upper) = 1 - tail exactly)."""
        if x == -math.inf:
            return 0.0
        s = max((m.mean - m.lower) if x <= m.mean else (m.upper - m.mean), 1e-9) / self._z
        return _norm_cdf((x - m.mean) / s)

    def _post_mean_above(self, m: MuMax, a: float) -> float:
        """Mean of the estimate's posterior (:meth:`_post_cdf`) truncated below at ``a``."""
        if a == -math.inf:
            return m.mean
        s_lo = max(m.mean - m.lower, 1e-9) / self._z
        s_hi = max(m.upper - m.mean, 1e-9) / self._z
        phi = 1.0 / math.sqrt(2.0 * math.pi)
        if a >= m.mean:                            # the upper half alone, truncated at a
            al = (a - m.mean) / s_hi
            tail = max(1.0 - _norm_cdf(al), 1e-300)
            return a if tail <= 1e-300 else m.mean + s_hi * phi * math.exp(-0.5 * al * al) / tail
        al = (a - m.mean) / s_lo                   # the lower half from a to the mean, and the whole upper half
        lower_part = m.mean * (0.5 - _norm_cdf(al)) + s_lo * phi * (math.exp(-0.5 * al * al) - 1.0)
        upper_part = 0.5 * m.mean + s_hi * phi
        return (lower_part + upper_part) / (1.0 - _norm_cdf(al))

    def _cdf(self, m: MuMax, x: float, mix: tuple) -> float:
        """Mixture CDF: the surviving posterior truncated below at the floor proven since, plus the change
        branch, the road-friction prior truncated below at each interval's floor (:meth:`_change_branch`)."""
        stay, cut, ps, cw, cwp, norm_ = mix
        post = max(self._post_cdf(m, x) - cut, 0.0)
        hz = self.hazard
        prior = min(max((x - hz.prior_lower) / (hz.prior_upper - hz.prior_lower), 0.0), 1.0)
        i = bisect_left(ps, prior)                  # the intervals whose floor lies below x
        return (stay * post + prior * cw[i] - cwp[i]) / norm_

    def _quantile(self, m: MuMax, q: float, mix: tuple) -> float:
        lo = min(m.lower - 10.0 * (m.upper - m.lower) - 1.0, self.hazard.prior_lower)
        hi = max(m.upper + 10.0 * (m.upper - m.lower) + 1.0, self.hazard.prior_upper)
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            if self._cdf(m, mid, mix) < q:
                lo = mid
            else:
                hi = mid
        return 0.5 * (lo + hi)


def belief_timeline(events: list[tuple[float, str, Any, float]], speed_t: np.ndarray,
                    speed_u: np.ndarray, t_grid: np.ndarray, hazard: HazardModel | None = None,
                    prob: float = 0.9, samples: Any = None, test: ContradictionTest | None = None
                    ) -> dict[str, np.ndarray]:
    """The belief in force of one scope at each time of ``t_grid`` (s, increasing), rebuilt from a run's record:
    ``events`` (time in force, "estimate", "floor" or "withdraw", the estimate (a GripEstimate or its MuMax; a
    floor belief's MuMax) or None, its data stamp) in time order, the speed trace (``speed_t``, ``speed_u``) the
    odometer integrates and every friction sample of the run (``samples``, a ScopeData in time order), watched
    (:meth:`BeliefTracker.observe`) and, with ``test``, tested for contradiction every ``test.period`` s of data
    time (0.5 s without), as the live node runs them. Returns
    arrays ``t``, ``mean``, ``lower``, ``upper``, ``age``, ``distance``, ``p_change``, ``known``, ``floor`` (what
    :meth:`BeliefTracker.belief` gives at each grid time, the same code as the live node's) and ``withdrawn_at``
    (times of the withdrawals)."""
    odo = Odometer(n=max(int(speed_t.size) + 1, 16))
    tracker = BeliefTracker(hazard, prob, odo)
    withdrawn_at: list[float] = []
    next_test = -math.inf
    period, window = (test.period, test.window) if test is not None else (ContradictionTest.period, 0.0)
    out = {k: np.empty(t_grid.size) for k in ("mean", "lower", "upper", "age", "distance", "p_change")}
    known = np.zeros(t_grid.size, dtype=bool)
    floor = np.zeros(t_grid.size, dtype=bool)
    i = j = 0
    for k, t in enumerate(t_grid):
        while j < speed_t.size and speed_t[j] <= t:
            odo.add_speed(float(speed_t[j]), float(speed_u[j]))
            j += 1
        while i < len(events) and events[i][0] <= t:
            _, kind, est, stamp = events[i]
            if kind == "estimate" and est is not None:
                if isinstance(est, MuMax):
                    tracker.set_estimate(est, stamp)
                else:
                    tracker.set_estimate(est.mu_max, stamp, est)
            elif kind == "floor" and est is not None:
                tracker.set_estimate(est, stamp, floor=True)
            elif kind == "withdraw":
                tracker.withdraw()
            i += 1
        if samples is not None and t >= next_test:
            next_test = t + period
            hi = int(np.searchsorted(samples.t, t, side="right"))
            seen = int(np.searchsorted(samples.t, tracker.observed_to, side="right"))
            if hi > seen:
                tracker.observe(_rows(samples, seen, hi))
            lo = np.searchsorted(samples.t, t - window, side="left")
            if test is not None and hi > lo and tracker.test(float(t), _rows(samples, lo, hi), test):
                withdrawn_at.append(float(t))
        b = tracker.belief(float(t))
        for name in out:
            out[name][k] = getattr(b, name)
        known[k] = b.known
        floor[k] = b.known and b.floor
    return {"t": np.asarray(t_grid, dtype=float), **out, "known": known, "floor": floor,
            "withdrawn_at": np.asarray(withdrawn_at, dtype=float)}


def _rows(data: Any, lo: int, hi: int) -> Any:
    """Rows ``lo:hi`` of a ScopeData (views)."""
    return type(data)(scope=data.scope, t=data.t[lo:hi], slip=data.slip[lo:hi], mu=data.mu[lo:hi],
                      slip_var=None if data.slip_var is None else data.slip_var[lo:hi],
                      mu_var=None if data.mu_var is None else data.mu_var[lo:hi],
                      lat=None if data.lat is None else data.lat[lo:hi])
