r"""The hierarchical Normal prior with a Gamma hyperprior on its precision, jointly or marginally.

.. math::

    w \mid \lambda \sim \mathcal N(0, \lambda^{-1}), \qquad \lambda \sim \mathrm{Gamma}(a, b)

(Molchanov 2022, Eq. 17). Inference can keep the precision as a latent variable (the joint
bound, Eq. 18) or marginalise it (the marginal bound, Eq. 19), where the prior of ``w`` is the
semi-implicit mixture :math:`p(w) = \int \mathcal N(w \mid 0, \lambda^{-1}) \mathrm{Gamma}(\lambda
\mid a, b) d\lambda`, estimated by :class:`~pyrozoo.inference.DSIVI_ELBO` from ``K2`` draws
of λ. Theorem 3: the marginal optimum is at least as close to the true posterior of ``w``.
This prior happens to be conjugate, so its marginal is also available in closed form (a
Student-t, ``form="exact"``) to check the estimates against.
"""

import math
from typing import Optional

import pyro
import pyro.distributions as dist
import torch
from torch.distributions.transforms import ReshapeTransform

from pyrozoo.distributions import ExplicitMixing, SemiImplicit
from pyrozoo.models.priors import INIT_VALUE_KEY, Prior, join_name
from pyrozoo.models.selection import ParameterSelector

FORMS = ("joint", "marginal", "exact")
SCOPES = ("weight", "parameter")


class NormalGammaPrior(Prior):
    r"""``w | λ ~ N(0, 1/λ)``, ``λ ~ Gamma(concentration, rate)``, one λ per weight or per tensor.

    :param float concentration: ``a``.
    :param float rate: ``b``.
    :param str form: ``"joint"``: a site ``"<parameter>.precision"`` for λ and ``"<parameter>"``
        for ``w | λ`` (Eq. 18; pair it with a guide over both, e.g. a mean-field guide whose
        LogNormal on λ has a closed-form KL to the Gamma); ``"marginal"``: one
        :class:`~pyrozoo.distributions.SemiImplicit` site per parameter (Eq. 19); ``"exact"``:
        the same marginal in closed form (Student-t), for evaluation.
    :param str scope: ``"weight"``: one precision per entry (the marginal is a product of
        Student-t densities, and estimates are per weight, the structured bound of Eq. 26);
        ``"parameter"``: one per tensor (a multivariate t; one joint estimate per tensor).
    :param int num_mixing: default ``K2`` of the marginal form's estimate.
    """

    def __init__(
        self,
        concentration: float = 1.0,
        rate: float = 1.0,
        *,
        form: str = "marginal",
        scope: str = "weight",
        num_mixing: int = 16,
        selector: Optional[ParameterSelector] = None,
        **selector_kwargs,
    ):
        super().__init__(selector, **selector_kwargs)
        for label, v in (("concentration", concentration), ("rate", rate)):
            if not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
                raise ValueError(f"{label} must be a positive finite number, got {v!r}")
        if form not in FORMS:
            raise ValueError(f"form must be one of {FORMS}, got {form!r}")
        if scope not in SCOPES:
            raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
        if isinstance(num_mixing, bool) or not isinstance(num_mixing, int) or num_mixing < 1:
            raise ValueError(f"num_mixing must be a positive int, got {num_mixing!r}")
        self.concentration = float(concentration)
        self.rate = float(rate)
        self.form = form
        self.scope = scope
        self.num_mixing = num_mixing
        # the joint form emits two sites per parameter (see Prior.one_site_per_parameter)
        self.one_site_per_parameter = form != "joint"

    def _hyper(self, param):
        kw = dict(device=param.device, dtype=param.dtype)
        return torch.tensor(self.concentration, **kw), torch.tensor(self.rate, **kw)

    def precision_prior(self, param: torch.Tensor) -> dist.Distribution:
        """``Gamma(a, b)`` over the precision(s) of ``param``: its shape, or a scalar."""
        a, b = self._hyper(param)
        if self.scope == "weight":
            return dist.Gamma(a, b).expand(param.shape).to_event(param.dim())
        return dist.Gamma(a, b)

    @staticmethod
    def _conditional(precision: torch.Tensor, shape: torch.Size, precision_ndims: int) -> dist.Distribution:
        """``N(0, 1/λ)`` over a tensor of ``shape``; ``λ`` has ``precision_ndims`` trailing
        dims (the shape, or none for one precision per tensor)."""
        scale = precision.rsqrt()
        if precision_ndims == 0:
            scale = scale.reshape(scale.shape + (1,) * len(shape))
        scale = scale.expand(scale.shape[: scale.dim() - len(shape)] + shape)
        return dist.Normal(torch.zeros((), dtype=scale.dtype, device=scale.device), scale).to_event(len(shape))

    def distribution(self, name, module, param):
        if self.form == "joint":
            raise RuntimeError("the joint form has two sites per parameter; use sample_module")
        key = (name, param.shape, param.device, param.dtype, self.form)
        return self._cached(key, lambda: self._make_marginal(param) if self.form == "marginal" else self._make_exact(param))

    def _make_marginal(self, param):
        a, b = self._hyper(param)
        shape = param.shape
        per_weight = self.scope == "weight"
        mixing = ExplicitMixing(dist.Gamma(a, b).expand(shape) if per_weight else dist.Gamma(a, b))
        nd = len(shape) if per_weight else 0

        def reverse(w):
            # p(λ | w): Gamma(a + n/2, b + ||w||^2 / 2), conjugate
            if per_weight:
                return dist.Gamma(a + 0.5, b + 0.5 * w * w)
            flat = w.reshape(w.shape[: w.dim() - len(shape)] + (-1,))
            return dist.Gamma(a + 0.5 * flat.shape[-1], b + 0.5 * (flat * flat).sum(-1))

        return SemiImplicit(
            mixing,
            lambda lam: self._conditional(lam, shape, nd),
            shape,
            num_mixing=self.num_mixing,
            group_ndims=len(shape) if per_weight else 0,
            reverse_conditional=reverse,
        )

    def _make_exact(self, param):
        a, b = self._hyper(param)
        shape = param.shape
        if self.scope == "weight":
            return dist.StudentT(2 * a, torch.zeros_like(a), (b / a).sqrt()).expand(shape).to_event(len(shape))
        n = max(param.numel(), 1)
        eye = torch.eye(n, dtype=param.dtype, device=param.device)
        mvt = dist.MultivariateStudentT(2 * a, torch.zeros(n, dtype=param.dtype, device=param.device), (b / a).sqrt() * eye)
        return dist.TransformedDistribution(mvt, ReshapeTransform(torch.Size((n,)), shape))

    def sample_module(self, module_name, module, params):
        if self.form != "joint":
            return super().sample_module(module_name, module, params)
        out = {}
        for param_name, param in params.items():
            name = join_name(module_name, param_name)
            precision = pyro.sample(f"{name}.precision", self.precision_prior(param))
            nd = param.dim() if self.scope == "weight" else 0
            out[param_name] = pyro.sample(name, self._conditional(precision, param.shape, nd), infer={INIT_VALUE_KEY: param.detach()})
        return out

    def __repr__(self):
        return (
            f"{type(self).__name__}(concentration={self.concentration}, rate={self.rate}, form={self.form!r}, "
            f"scope={self.scope!r}, num_mixing={self.num_mixing}, selector={self.selector!r})"
        )
