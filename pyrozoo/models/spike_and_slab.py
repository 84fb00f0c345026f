r"""The spike-and-slab Gaussian-Laplace (SSGL) prior of Deng et al. (2019, Sec. 3.1).

Weights of the chosen *sparse* parameters (the paper's layers :math:`\mathfrak X`) get

.. math::

    \beta_{lj} \mid \sigma^2, \gamma_{lj} \sim (1 - \gamma_{lj})\, \mathcal L(0, \sigma v_0)
        + \gamma_{lj}\, \mathcal N(0, \sigma^2 v_1), \qquad  (4)

with :math:`\gamma_{lj} \mid \delta_l \sim \mathrm{Bernoulli}(\delta_l)`,
:math:`\delta_l \sim \mathrm{Beta}(a, b)` per sparse parameter tensor and
:math:`\sigma^2 \sim \mathrm{IG}(\nu/2, \nu\lambda/2)`; every other selected parameter
(:math:`\mathfrak C`) gets :math:`\mathcal N(0, \sigma_0^2)`. :math:`\rho = P(\gamma = 1)` is
the probability of the *Gaussian* component. Which component is the spike depends on the
hyperparameters (the Laplace is the narrower one for the regression's ``v0 = 0.01, v1 = 10``,
the Gaussian for the CIFAR setting ``v0 = 0.005, v1 = 1e-5``), so nothing here calls
either one the spike.

The prior has two forms:

* **hierarchical** (the default): the generative model above with sample sites
  ``"<prefix>sigma_sq"``, ``"<param>.delta"``, ``"<param>.gamma"`` and ``"<param>"``
  (prior predictive checks, full Bayesian use);
* **empirical Bayes** (after :meth:`SpikeAndSlabPrior.empirical_bayes`): the latent
  variables :math:`\theta = (\rho, \kappa_0, \kappa_1, \sigma, \delta)` are *optimised* by
  stochastic approximation (:class:`~pyrozoo.inference.sgmcmc_sa.StochasticApproximation`)
  and held in an :class:`SSGLState`, not sampled. Each sparse weight tensor is one sample
  site whose "log-density" is the EM expectation of Eq. 10 over the indicators,
  :math:`-\kappa_0 |\beta| / \sigma - \kappa_1 \beta^2 / (2\sigma^2)` plus the expected
  normalisers (:class:`~pyrozoo.distributions.SSGLExpectedLogDensity`), so the model's
  log-joint is :math:`Q_1` and the sampler's drift is :math:`\nabla_\beta Q`.

In a :class:`~pyrozoo.models.BayesianNeuralNetwork` the prior covers the network's parameters.
In a plain Pyro model (no network) the sparse weights are sites the model draws itself::

    prior = SpikeAndSlabPrior(v0=0.01, v1=10.0)
    prior.empirical_bayes({"beta": (p,)})          # the model's sparse sites and their shapes

    def model(x, y=None, idx=None):
        beta = prior.sample_sparse("beta")          # the site of Eq. 10's expectation
        with pyro.plate("data", N, subsample=idx):
            pyro.sample("y", dist.Normal(x @ beta, 1.0), obs=y)

    SGLD(model, lr=1e-5, adaptations=[StochasticApproximation(prior, 1.0)])
"""

import math
from collections.abc import Mapping
from typing import Dict, Optional, Union

import pyro
import pyro.distributions as dist
import torch
from torch import nn

from pyrozoo.distributions.elastic_net import ElasticNet
from pyrozoo.distributions.ssgl_expectation import SSGLExpectedLogDensity
from pyrozoo.models.priors import INIT_VALUE_KEY, Prior, join_name
from pyrozoo.models.selection import ParameterSelector


def _positive(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite positive number, got {value!r}")
    return float(value)


class SSGLState:
    """The empirical-Bayes latent variables of an SSGL prior (Deng et al. 2019, Sec. 3.3).

    Per sparse parameter ``name``: ``rho[name]``, ``kappa0[name]``, ``kappa1[name]`` shaped
    like the parameter and ``delta[name]`` (0-dim); ``sigma`` is global (0-dim). All live on
    the parameters' device and dtype and are updated in place.
    """

    def __init__(self, rho: Dict[str, torch.Tensor], kappa0: Dict[str, torch.Tensor], kappa1: Dict[str, torch.Tensor], delta: Dict[str, torch.Tensor], sigma: torch.Tensor):
        self.rho, self.kappa0, self.kappa1, self.delta, self.sigma = rho, kappa0, kappa1, delta, sigma

    @property
    def names(self):
        return list(self.rho)

    @property
    def num_sparse(self) -> int:
        """:math:`p = \\sum_{l \\in \\mathfrak X} p_l`."""
        return sum(r.numel() for r in self.rho.values())

    def to(self, device=None, dtype=None) -> "SSGLState":
        def move(t):
            return t.to(device=device, dtype=dtype)

        for d in (self.rho, self.kappa0, self.kappa1, self.delta):
            for k in d:
                d[k] = move(d[k])
        self.sigma = move(self.sigma)
        return self

    def state_dict(self) -> dict:
        copy = lambda d: {k: v.clone() for k, v in d.items()}  # noqa: E731
        return {"rho": copy(self.rho), "kappa0": copy(self.kappa0), "kappa1": copy(self.kappa1), "delta": copy(self.delta), "sigma": self.sigma.clone()}

    def load_state_dict(self, state: dict) -> None:
        for key in ("rho", "kappa0", "kappa1", "delta"):
            mine = getattr(self, key)
            if set(mine) != set(state[key]):
                raise ValueError(f"saved SSGL state covers {sorted(state[key])}, this one {sorted(mine)}")
            for name, t in mine.items():
                t.copy_(state[key][name])
        self.sigma.copy_(state["sigma"])


class SpikeAndSlabPrior(Prior):
    r"""Spike-and-slab Gaussian-Laplace prior over a network's parameters (Eq. 4).

    :param float v0: Laplace scale factor (the Laplace component has scale :math:`\sigma v_0`).
    :param float v1: Gaussian variance factor (variance :math:`\sigma^2 v_1`).
    :param layer_scale: ``{sparse parameter name: c}``: that parameter's components widen by
        ``c`` (Laplace scale :math:`\sigma v_0 c`, Gaussian variance :math:`\sigma^2 v_1 c^2`);
        absent names keep ``c = 1``. This is how hyperparameters set for one unit of the targets
        carry over to another: :math:`\sigma` is in the targets' unit, the output layer's
        weights scale with it, a hidden layer's do not, so after dividing the targets by ``s``
        the hidden layers need ``c = s`` for the same prior (Deng et al. set ``v0`` for raw UCI
        targets).
    :param sparse: which of a network's selected parameters are sparse (:math:`\mathfrak X`):
        a :class:`~pyrozoo.models.ParameterSelector` or a dict of its keyword arguments,
        e.g. ``{"expose_modules": ["fc1"], "hide_parameters": ["bias"]}`` (the weight of
        ``fc1``). ``None`` (the default) for a plain Pyro model, whose sparse sites are named
        in :meth:`empirical_bayes` and drawn by :meth:`sample_sparse`.
    :param float gaussian_scale: :math:`\sigma_0` of the other parameters.
    :param float nu, lam: inverse-gamma hyperparameters of :math:`\sigma^2`.
    :param float a, b: Beta hyperparameters of :math:`\delta_l` (both ``>= 1``, so that the
        closed-form update of Eq. 15 is the maximiser in [0, 1]).
    :param str prefix: prefix of the global site names (``"<prefix>sigma_sq"``).
    :param selector: which parameters are random at all (default: all).
    """

    one_site_per_parameter = False

    def __init__(
        self,
        v0: float,
        v1: float,
        *,
        sparse: Union[ParameterSelector, dict, None] = None,
        layer_scale: Optional[Mapping] = None,
        gaussian_scale: float = 1.0,
        nu: float = 1.0,
        lam: float = 1.0,
        a: float = 1.0,
        b: float = 1.0,
        prefix: str = "ssgl.",
        selector: Optional[ParameterSelector] = None,
        **selector_kwargs,
    ):
        super().__init__(selector, **selector_kwargs)
        self.v0 = _positive("v0", v0)
        self.v1 = _positive("v1", v1)
        if layer_scale is not None and not isinstance(layer_scale, Mapping):
            raise TypeError(f"layer_scale must be a dict {{sparse parameter name: factor}}, got {type(layer_scale).__name__}")
        self.layer_scale = {str(name): _positive(f"layer_scale[{name!r}]", c) for name, c in (layer_scale or {}).items()}
        self.gaussian_scale = _positive("gaussian_scale", gaussian_scale)
        self.nu = _positive("nu", nu)
        self.lam = _positive("lam", lam)
        for name, value in (("a", a), ("b", b)):
            if _positive(name, value) < 1:
                raise ValueError(f"{name} must be >= 1 (the Beta prior's mode, Eq. 15, lies in [0, 1] only then), got {value!r}")
        self.a, self.b = float(a), float(b)
        if isinstance(sparse, dict):
            sparse = ParameterSelector(**sparse)
        if sparse is not None and not isinstance(sparse, ParameterSelector):
            raise TypeError(f"sparse must be a ParameterSelector, a dict of its arguments or None, got {type(sparse).__name__}")
        self.sparse = sparse
        self.prefix = prefix
        self.state: Optional[SSGLState] = None
        self._sparse_names: Optional[list] = None
        self._sigma_current = None

    # -- selection ---------------------------------------------------------------------------
    def random_parameters(self, net: nn.Module):
        if self.sparse is None:
            raise ValueError(
                "SpikeAndSlabPrior(sparse=None) is the form for plain Pyro models; on a network, say which of its "
                "parameters are sparse, e.g. sparse={'expose_parameters': ['weight']}"
            )
        random = super().random_parameters(net)
        sparse = [join_name(m, p) for m, module, p, param in random if self.sparse.is_selected(m, module, p, param)]
        if not sparse:
            raise ValueError(f"{self.sparse!r} selects none of the random parameters {[join_name(m, p) for m, _, p, _ in random]}: no sparse layer")
        self._check_layer_scale(sparse)
        self._sparse_names = sparse
        return random

    def _check_layer_scale(self, sparse_names) -> None:
        unknown = sorted(set(self.layer_scale) - set(sparse_names))
        if unknown:
            raise ValueError(f"layer_scale names {unknown}, which are not sparse parameters; the sparse ones are {list(sparse_names)}")

    def v0_of(self, name: str) -> float:
        """The Laplace scale factor of sparse parameter ``name``: :math:`v_0 c` (``layer_scale``)."""
        return self.v0 * self.layer_scale.get(name, 1.0)

    def v1_of(self, name: str) -> float:
        """The Gaussian variance factor of sparse parameter ``name``: :math:`v_1 c^2` (``layer_scale``)."""
        return self.v1 * self.layer_scale.get(name, 1.0) ** 2

    @property
    def sparse_names(self):
        if self._sparse_names is None:
            raise RuntimeError("the prior has not been attached to a network yet (build a BayesianNeuralNetwork with it)")
        return list(self._sparse_names)

    @property
    def sigma_site(self) -> str:
        return f"{self.prefix}sigma_sq"

    # -- empirical Bayes -------------------------------------------------------------------
    def empirical_bayes(self, net: Union[nn.Module, Mapping], *, sigma: float = 1.0, rho: float = 0.5, kappa0: Optional[float] = None, kappa1: Optional[float] = None, delta: float = 0.5) -> SSGLState:
        r"""Switches to the empirical-Bayes form with the initial values
        :math:`\theta^{(1)}` (Algorithm 1) and returns its :class:`SSGLState`.

        ``kappa0`` / ``kappa1`` default to their Eq. 13 values at ``rho``,
        :math:`(1 - \rho)/v_0` and :math:`\rho / v_1` (per sparse parameter, with its ``layer_scale``).

        :param net: the network (or the :class:`~pyrozoo.models.BayesianNeuralNetwork`); for a
            plain Pyro model, ``{site name: shape or tensor}`` of the sparse weight sites the
            model draws with :meth:`sample_sparse` (a tensor gives its shape, device and dtype).
        """
        if not isinstance(net, (nn.Module, Mapping)):
            raise TypeError(
                f"empirical_bayes takes the network (or BayesianNeuralNetwork) or, for a plain Pyro model, "
                f"{{site name: shape}} of its sparse sites; got {type(net).__name__}"
            )
        _positive("sigma", sigma)
        for name, value in (("rho", rho), ("delta", delta)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
        for name, value in (("kappa0", kappa0), ("kappa1", kappa1)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value >= 0)):
                raise ValueError(f"{name} must be a finite non-negative number, got {value!r}")
        if kappa0 == 0 and kappa1 == 0:
            raise ValueError("kappa0 and kappa1 cannot both be 0: the sparse weights would have a flat prior")
        params = self._sparse_sites(net) if isinstance(net, Mapping) else self._sparse_parameters(getattr(net, "net", net))
        first = next(iter(params.values()))
        k0 = {n: (1.0 - rho) / self.v0_of(n) if kappa0 is None else kappa0 for n in params}
        k1 = {n: rho / self.v1_of(n) if kappa1 is None else kappa1 for n in params}
        self.state = SSGLState(
            rho={n: torch.full_like(p, rho).detach() for n, p in params.items()},
            kappa0={n: torch.full_like(p, k0[n]).detach() for n, p in params.items()},
            kappa1={n: torch.full_like(p, k1[n]).detach() for n, p in params.items()},
            delta={n: torch.tensor(float(delta), device=p.device, dtype=p.dtype) for n, p in params.items()},
            sigma=torch.tensor(float(sigma), device=first.device, dtype=first.dtype),
        )
        return self.state

    def _sparse_parameters(self, net: nn.Module) -> Dict[str, torch.Tensor]:
        random = self.random_parameters(net)
        return {join_name(m, p): param for m, _, p, param in random if join_name(m, p) in self._sparse_names}

    def _sparse_sites(self, sites: Mapping) -> Dict[str, torch.Tensor]:
        """``{name: tensor}`` from a plain model's ``{site name: shape or tensor}``."""
        if self.sparse is not None:
            raise ValueError("this prior selects sparse parameters of a network (sparse=...): pass empirical_bayes the network, or create the prior with sparse=None for a plain Pyro model")
        if not sites:
            raise ValueError("empirical_bayes({}) names no sparse site: give {site name: shape} of the model's sparse weights")
        out = {}
        for name, spec in sites.items():
            if not isinstance(name, str):
                raise TypeError(f"sparse site names must be strings, got {name!r}")
            if torch.is_tensor(spec):
                out[name] = spec.detach()
                continue
            try:
                shape = torch.Size(spec)
            except TypeError:
                raise TypeError(f"sparse site {name!r}: give its shape (a tuple of ints) or a tensor, got {spec!r}") from None
            out[name] = torch.zeros(shape)
        self._check_layer_scale(out)
        self._sparse_names = list(out)
        return out

    def hierarchical(self) -> None:
        """Switches back to the generative (hierarchical) form."""
        self.state = None

    # -- the Pyro model -------------------------------------------------------------------
    def sample_module(self, module_name, module, params):
        sparse = self.sparse_names
        out = {}
        for param_name, param in params.items():
            name = join_name(module_name, param_name)
            if name not in sparse:
                out[param_name] = pyro.sample(name, self._gaussian(name, param), infer={INIT_VALUE_KEY: param.detach()})
            elif self.state is not None:
                out[param_name] = self._sample_empirical_bayes(name, param)
            else:
                out[param_name] = self._sample_hierarchical(name, param)
        return out

    def sample_sparse(self, name: str, init: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Draws the sparse weight site ``name`` of a plain Pyro model (one named in
        :meth:`empirical_bayes`) under the empirical-Bayes form: the site whose log-density is
        the expectation of Eq. 10, built on the :class:`SSGLState` that
        :class:`~pyrozoo.inference.sgmcmc_sa.StochasticApproximation` updates.

        :param init: where a sampler starts the site; by default, as for any site whose prior
            cannot be sampled, uniformly in ``(-2, 2)`` (:func:`pyrozoo.guides.init_to_network`):
            from 0 the first SA step would give every weight to the narrower component.
        """
        if self.state is None:
            raise ValueError(
                f"sample_sparse({name!r}) draws the empirical-Bayes form: call prior.empirical_bayes({{{name!r}: shape, ...}}) "
                "first, naming the model's sparse sites (the hierarchical form, with discrete indicators, is drawn by a "
                "BayesianNeuralNetwork)"
            )
        if name not in self.state.rho:
            raise ValueError(f"{name!r} is not one of the sparse sites named in empirical_bayes: {self.state.names}")
        ref = self.state.rho[name]
        if init is not None and (not torch.is_tensor(init) or init.shape != ref.shape):
            raise ValueError(f"sample_sparse({name!r}): init must be a tensor of shape {tuple(ref.shape)}, got {getattr(init, 'shape', init)!r}")
        return self._sample_empirical_bayes(name, init, event_dim=ref.dim())

    def _gaussian(self, name, param):
        key = ("gaussian", name, param.shape, param.device, param.dtype)
        return self._cached(key, lambda: dist.Normal(torch.zeros((), device=param.device, dtype=param.dtype), self.gaussian_scale).expand(param.shape).to_event(param.dim()))

    def _sample_empirical_bayes(self, name, param, event_dim=None):
        state = self.state
        if name not in state.rho:
            raise RuntimeError(f"the empirical-Bayes state has no entry for sparse parameter {name!r}; call empirical_bayes(net) again")
        prior = SSGLExpectedLogDensity(state.kappa0[name], state.kappa1[name], state.rho[name], state.sigma, self.v0_of(name), self.v1_of(name))
        infer = {} if param is None else {INIT_VALUE_KEY: param.detach()}
        return pyro.sample(name, prior.to_event(param.dim() if event_dim is None else event_dim), infer=infer)

    def _sample_hierarchical(self, name, param):
        like = dict(device=param.device, dtype=param.dtype)
        if name == self._sparse_names[0]:
            ig = self._cached(("sigma_sq", param.device, param.dtype), lambda: dist.InverseGamma(torch.tensor(self.nu / 2, **like), torch.tensor(self.nu * self.lam / 2, **like)))
            self._sigma_current = pyro.sample(self.sigma_site, ig).sqrt()
        sigma = self._sigma_current
        beta = self._cached(("delta", param.device, param.dtype), lambda: dist.Beta(torch.tensor(self.a, **like), torch.tensor(self.b, **like)))
        delta = pyro.sample(f"{name}.delta", beta)
        gamma = pyro.sample(f"{name}.gamma", dist.Bernoulli(delta).expand(param.shape).to_event(param.dim()))
        conditional = ElasticNet((1.0 - gamma) / (sigma * self.v0_of(name)), gamma / (sigma.square() * self.v1_of(name)))
        return pyro.sample(name, conditional.to_event(param.dim()), infer={INIT_VALUE_KEY: param.detach()})

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(v0={self.v0}, v1={self.v1}, sparse={self.sparse!r}, layer_scale={self.layer_scale}, gaussian_scale={self.gaussian_scale}, "
            f"nu={self.nu}, lam={self.lam}, a={self.a}, b={self.b}, selector={self.selector!r})"
        )
