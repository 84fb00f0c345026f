"""The Laplace approximation, post hoc on a MAP fit, through ``laplace-torch`` (Daxberger et al.,
"Laplace Redux — Effortless Bayesian Deep Learning", NeurIPS 2021).

At the MAP weights ``w*`` the posterior is approximated by ``N(w*, P^-1)`` with the precision
``P = H + prior precision``, ``H`` the generalised Gauss-Newton approximation to the Hessian
of the negative log likelihood summed over the training set (MacKay 1992), either over all
weights or over the last layer's only (the others fixed at ``w*``), and either diagonal or
Kronecker-factored per layer (KFAC, Martens & Grosse 2015; Ritter et al. 2018). Predictions
use the linearised network ``f(x, w) ~ f(x, w*) + J(x) (w - w*)`` (the "GLM predictive"),
whose outputs are Gaussian: ``N(f(x, w*), J P^-1 J^T)``; :meth:`LaplaceBaseline.sample_outputs`
draws from it (or, with ``pred_type="nn"``, runs the network at sampled weights).

The prior precision starts at the MAP fit's (``1 / s^2`` for its ``N(0, s^2)`` prior) and is
by default tuned post hoc by maximising the Laplace approximation of the marginal likelihood
(laplace-torch's ``optimize_prior_precision(method="marglik")``), as Laplace Redux recommends.
For regression the Gaussian noise is the MAP fit's (``sigma = tau^-1/2``), kept fixed.

Installing: laplace-torch 0.3 declares torchvision but runs without it, so a CPU machine
installs it without dependencies and adds those it uses (``scripts/setup.sh`` does)::

    pip install --no-deps laplace-torch asdfghjkl==0.1a4 backpack-for-pytorch unfoldNd curvlinops-for-pytorch \
        einconv linear_operator jaxtyping wadler-lindig opt-einsum torchmetrics lightning-utilities einops
"""

import math
import warnings
from typing import Dict, Optional, Tuple, Union

import torch
from torch import nn

from pyrozoo.baselines.predictive import Baseline, check_likelihood
from pyrozoo.baselines.training import NoisePrecision
from pyrozoo.models.likelihoods import CategoricalLikelihood, Likelihood

__all__ = ["LaplaceBaseline", "require_laplace", "SUBSETS", "HESSIANS"]

#: which weights the approximation covers, and the Hessian's structure (laplace-torch's names)
SUBSETS = ("last_layer", "all")
HESSIANS = ("kron", "diag")

#: floats of the Jacobians ``(chunk, outputs, weights)`` the GLM predictive builds at once
_JACOBIAN_FLOATS = 2**24


def require_laplace():
    """The ``laplace`` module, or an ``ImportError`` that says how to install it."""
    try:
        import laplace
    except ImportError as e:
        raise ImportError(
            "the Laplace baseline needs laplace-torch: run scripts/setup.sh, or pip install --no-deps laplace-torch "
            "and its dependencies as listed in pyrozoo/baselines/laplace.py (it declares torchvision but runs without it)"
        ) from e
    return laplace


class LaplaceBaseline(Baseline):
    """A Laplace approximation around a trained (MAP) network.

    :param net: the network at its MAP weights (e.g. fitted by
        :func:`~pyrozoo.baselines.training.train_map`); laplace-torch reads and, for
        ``pred_type="nn"``, temporarily overwrites its parameters.
    :param likelihood: :class:`~pyrozoo.models.GaussianLikelihood` or :class:`~pyrozoo.models.CategoricalLikelihood`.
    :param noise: the MAP fit's :class:`~pyrozoo.baselines.training.NoisePrecision` (regression
        with a precision prior); otherwise the likelihood's fixed precision is the noise.
    :param subset: ``"last_layer"`` or ``"all"`` weights.
    :param hessian: ``"kron"`` (KFAC) or ``"diag"``.
    :param prior_precision: the initial prior precision (``1 / s^2`` of the MAP prior).
    :param tune_prior: ``"marglik"`` (default), ``"none"``, or laplace-torch's ``"gridsearch"``
        (needs a validation loader, not supported here).
    :param prior_structure: ``"scalar"`` (one precision), ``"layerwise"`` or ``"diag"``, when tuned.
    :param pred_type: ``"glm"`` (the linearised predictive) or ``"nn"`` (sampled weights; all
        weights only: laplace-torch 0.3 samples the wrong vector for a last-layer approximation).
        The GLM predictive needs each input's Jacobian over the approximated weights: cheap for
        the last layer, slow for all the weights of a large network on a CPU (seconds per 100
        inputs for a 784-100-10 network), where ``"nn"`` is fast but known to underfit
        (Immer et al. 2021, "Improving predictions of Bayesian neural nets via local linearization").
    :param backend: laplace-torch's curvature backend: ``"backpack"``, ``"curvlinops"``, or
        ``"auto"``: BackPack for all weights (its diagonal GGN is orders of magnitude faster
        than curvlinops' on a CPU), curvlinops (laplace-torch's default) for the last layer.
    """

    def __init__(
        self, net: nn.Module, likelihood: Likelihood, noise: Optional[NoisePrecision] = None, *, subset: str = "last_layer", hessian: str = "kron",
        prior_precision: float = 1.0, tune_prior: str = "marglik", prior_structure: str = "scalar", pred_type: str = "glm", backend: str = "auto",
    ):
        require_laplace()
        if subset not in SUBSETS:
            raise ValueError(f"subset must be one of {SUBSETS}, got {subset!r}")
        if hessian not in HESSIANS:
            raise ValueError(f"hessian must be one of {HESSIANS}, got {hessian!r}")
        if tune_prior not in ("marglik", "none"):
            raise ValueError(f"tune_prior must be 'marglik' or 'none', got {tune_prior!r}")
        if pred_type not in ("glm", "nn"):
            raise ValueError(f"pred_type must be 'glm' or 'nn', got {pred_type!r}")
        if backend not in ("auto", "backpack", "curvlinops"):
            raise ValueError(f"backend must be 'auto', 'backpack' or 'curvlinops', got {backend!r}")
        if pred_type == "nn" and subset != "all":
            raise ValueError("pred_type='nn' needs subset='all' (laplace-torch 0.3 cannot sample a last-layer approximation's weights); use pred_type='glm'")
        self.net = net
        self.likelihood = check_likelihood(likelihood)
        self.noise = noise if noise is not None else NoisePrecision(self.likelihood)
        self.subset, self.hessian, self.pred_type = subset, hessian, pred_type
        self.prior_precision, self.tune_prior, self.prior_structure = float(prior_precision), tune_prior, prior_structure
        self.backend = ("backpack" if subset == "all" else "curvlinops") if backend == "auto" else backend
        self.la = None

    def _sigma_noise(self) -> float:
        if isinstance(self.likelihood, CategoricalLikelihood):
            return 1.0
        latents = self.noise.latents()
        precision = float(latents["precision"].detach()) if latents else self.likelihood.precision
        return 1.0 / math.sqrt(precision)

    def fit(self, x: torch.Tensor, y: torch.Tensor, batch_size: int = 256) -> "LaplaceBaseline":
        """Computes the curvature over the training data ``(x, y)`` (one pass, minibatches of
        ``batch_size``) at the network's current weights and, unless ``tune_prior="none"``,
        tunes the prior precision."""
        laplace = require_laplace()
        from laplace.curvature import BackPackGGN, CurvlinopsGGN

        regression = not isinstance(self.likelihood, CategoricalLikelihood)
        if regression:
            y = y.reshape(len(y), -1)  # laplace-torch wants targets shaped like the outputs, (n, outputs)
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=int(batch_size))
        self.la = laplace.Laplace(
            self.net, "regression" if regression else "classification", subset_of_weights=self.subset, hessian_structure=self.hessian,
            sigma_noise=self._sigma_noise(), prior_precision=self.prior_precision, backend=BackPackGGN if self.backend == "backpack" else CurvlinopsGGN,
        )
        with warnings.catch_warnings():
            # BackPack's hooks fire on module outputs when the inputs need no gradient: as meant here
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            self.la.fit(loader)
        if self.tune_prior == "marglik":
            with warnings.catch_warnings():
                # (it reminds classification users that the predictive's link approximation is chosen at prediction)
                warnings.filterwarnings("ignore", message="By default `link_approx` is `probit`")
                warnings.filterwarnings("ignore", message="Full backward hook is firing")
                self.la.optimize_prior_precision(pred_type=self.pred_type, method="marglik", prior_structure=self.prior_structure, link_approx="mc" if self.pred_type == "nn" else "probit")
        return self

    def _chunk(self) -> int:
        if self.pred_type == "nn":
            return 4096
        weights = self.la.n_params
        return max(1, _JACOBIAN_FLOATS // max(1, weights * max(1, self.la.n_outputs)))

    def sample_outputs(self, x: torch.Tensor, num_samples: int = 100) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        """``num_samples`` draws of the network outputs from the Laplace predictive (in chunks
        of inputs, each drawn independently: the draws of one input are what its predictive
        mixture needs)."""
        if self.la is None:
            raise RuntimeError("LaplaceBaseline: not fitted yet; call fit(x, y) first")
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            chunks = [self.la.functional_samples(part, pred_type=self.pred_type, n_samples=num_samples).detach() for part in torch.split(x, self._chunk())]
        f = torch.cat(chunks, 1).to(x.dtype)
        latents = {k: v.detach().expand(num_samples) for k, v in self.noise.latents().items()}
        return f, latents

    @property
    def fitted_prior_precision(self) -> Union[float, torch.Tensor]:
        """The prior precision after tuning (a scalar, or one per layer / weight)."""
        if self.la is None:
            raise RuntimeError("LaplaceBaseline: not fitted yet")
        p = self.la.prior_precision.detach()
        return float(p) if p.numel() == 1 else p
