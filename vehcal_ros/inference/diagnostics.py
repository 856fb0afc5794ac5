"""Convergence and summary diagnostics via arviz (split R-hat, bulk/tail ESS, MCSE, HDI).

Draws are always arrays shaped ``(chain, draw, parameter)`` (emcee's ``get_chain`` convention, chains first as
arviz expects). Used by the grip estimator (adaptive Metropolis chains) and the calibrator (SMC runs as chains);
the 8-DOF paper reports mean, sd, 94 % HDI, MCSE, R-hat and bulk/tail ESS per parameter (its Tables 4, 6, 8).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import arviz


@functools.cache
def _az():
    """arviz, imported on first use: its import takes ~2 s (its plotting modules, a numba ufunc compiled at
    import), which a process that only fits grip chains, or a replay's worker before its first calibration fit,
    need not pay."""
    with warnings.catch_warnings():  # arviz 0.2x announces its 1.x refactor on import
        warnings.simplefilter("ignore", FutureWarning)
        import arviz as az
    return az


@dataclass(frozen=True)
class ParamSummary:
    """Posterior summary of one scalar parameter (units of the parameter)."""

    mean: float
    std: float
    hdi_low: float
    hdi_high: float
    mcse_mean: float
    r_hat: float
    ess_bulk: float
    ess_tail: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def to_inference_data(draws: np.ndarray, names: Sequence[str], **extra: np.ndarray) -> arviz.InferenceData:
    """Wrap ``draws[chain, draw, param]`` (and optional extra ``[chain, draw]`` quantities) as InferenceData."""
    draws = np.asarray(draws, dtype=float)
    if draws.ndim != 3 or draws.shape[2] != len(names):
        raise ValueError(f"draws must be (chain, draw, {len(names)}), got {draws.shape}")
    posterior = {name: draws[:, :, i] for i, name in enumerate(names)}
    for key, value in extra.items():
        posterior[key] = np.asarray(value, dtype=float)
    return _az().from_dict(posterior=posterior)


def summarize_draws(draws: np.ndarray, names: Sequence[str], hdi_prob: float = 0.94) -> dict[str, ParamSummary]:
    """Per-parameter :class:`ParamSummary` of ``draws[chain, draw, param]``.

    R-hat is the rank-normalised split R-hat and ESS the bulk/tail ESS of Vehtari et al. (2021), as arviz
    computes them; with a single chain R-hat is split within that chain.
    """
    draws = np.asarray(draws, dtype=float)
    out: dict[str, ParamSummary] = {}
    for i, name in enumerate(names):
        x = draws[:, :, i]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hdi = _az().hdi(x.ravel(), hdi_prob=hdi_prob) if x.size > 2 else (np.nan, np.nan)
            r_hat = float(_az().rhat(x)) if x.shape[1] >= 4 else float("nan")
            ess_bulk = float(_az().ess(x, method="bulk")) if x.shape[1] >= 4 else float("nan")
            ess_tail = float(_az().ess(x, method="tail")) if x.shape[1] >= 4 else float("nan")
            mcse = float(np.ravel(_az().mcse(x, method="mean"))[0]) if x.shape[1] >= 4 else float("nan")
        out[name] = ParamSummary(
            mean=float(np.mean(x)), std=float(np.std(x, ddof=1)) if x.size > 1 else 0.0,
            hdi_low=float(hdi[0]), hdi_high=float(hdi[1]), mcse_mean=mcse,
            r_hat=r_hat, ess_bulk=ess_bulk, ess_tail=ess_tail,
        )
    return out


def converged(summaries: dict[str, ParamSummary], r_hat_max: float = 1.01, ess_min: float = 400.0,
              ess_tail_min: float | None = None) -> bool:
    """The convergence rule used project-wide: every split R-hat at most ``r_hat_max``, every bulk ESS and every
    tail ESS at least ``ess_min`` (``ess_tail_min`` when given)."""
    tail_min = ess_min if ess_tail_min is None else ess_tail_min
    return all(np.isfinite(s.r_hat) and s.r_hat <= r_hat_max and s.ess_bulk >= ess_min and s.ess_tail >= tail_min
               for s in summaries.values())


def rhat_ess(draws: np.ndarray, names: Sequence[str]) -> dict[str, tuple[float, float, float]]:
    """(split R-hat, bulk ESS, tail ESS) per parameter of ``draws[chain, draw, param]`` in one arviz call
    (rank-normalised split R-hat and bulk/tail ESS of Vehtari et al. 2021); NaN with fewer than 4 draws."""
    draws = np.asarray(draws, dtype=float)
    if draws.ndim != 3 or draws.shape[2] != len(names):
        raise ValueError(f"draws must be (chain, draw, {len(names)}), got {draws.shape}")
    if draws.shape[1] < 4:
        return {n: (float("nan"),) * 3 for n in names}
    az = _az()
    ds = az.convert_to_dataset({n: draws[:, :, i] for i, n in enumerate(names)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r, b, t = az.rhat(ds), az.ess(ds, method="bulk"), az.ess(ds, method="tail")
    return {n: (float(r[n]), float(b[n]), float(t[n])) for n in names}
