"""Turning a plain ``nn.Module`` into a Bayesian Pyro model."""

from typing import Dict, List, Optional, Tuple

import pyro
import torch
from torch import nn
from torch.func import functional_call

from pyrozoo.models.likelihoods import Likelihood
from pyrozoo.models.priors import Prior, join_name


class BayesianNeuralNetwork(nn.Module):
    """A Pyro model made of an architecture, a prior and a likelihood.

    ``model(x, y=None, subsample=None)`` samples the parameters the prior selects (one
    ``pyro.sample`` site per parameter, or whatever structure the prior defines), runs the
    network with them, and lets the likelihood observe ``y`` under the data plate. The
    other parameters remain the network's own point estimates and are registered with
    Pyro's param store under ``"<name>.<parameter>"`` (so ``SVI`` optimises them).
    The return value is the network output, which ``Predictive`` exposes as ``"_RETURN"``.

    The network is called with :func:`torch.func.functional_call`, so it is never
    modified: ``model.net`` stays a usable deterministic network.

    :param nn.Module net: the architecture.
    :param Prior prior: which parameters are random, with which prior.
    :param Likelihood likelihood: the observation model.
    :param str name: prefix of the param-store names of the deterministic parameters.
    """

    def __init__(self, net: nn.Module, prior: Prior, likelihood: Likelihood, *, name: str = "net"):
        super().__init__()
        if not isinstance(net, nn.Module):
            raise TypeError(f"net must be an nn.Module, got {type(net).__name__}")
        if not isinstance(prior, Prior):
            raise TypeError(f"prior must be a pyrozoo Prior, got {type(prior).__name__}")
        if not isinstance(likelihood, Likelihood):
            raise TypeError(f"likelihood must be a pyrozoo Likelihood, got {type(likelihood).__name__}")
        self.net = net
        self.prior = prior
        self.likelihood = likelihood
        self.name = name
        self._build_plan()

    def _build_plan(self) -> None:
        random = self.prior.random_parameters(self.net)
        if not random:
            raise ValueError(f"{self.prior!r} selects no parameter of the network: nothing would be random")
        groups: Dict[str, Tuple[nn.Module, Dict[str, nn.Parameter]]] = {}
        random_ids = set()
        for module_name, module, param_name, param in random:
            groups.setdefault(module_name, (module, {}))[1][param_name] = param
            random_ids.add(id(param))
        self._random: List[Tuple[str, nn.Module, Dict[str, nn.Parameter]]] = [
            (module_name, module, params) for module_name, (module, params) in groups.items()
        ]
        self._deterministic: List[Tuple[str, nn.Parameter]] = [
            (name, p) for name, p in self.net.named_parameters() if id(p) not in random_ids
        ]
        self._random_names = [join_name(m, p) for m, _, params in self._random for p in params]

    @property
    def random_parameter_names(self) -> List[str]:
        return list(self._random_names)

    @property
    def deterministic_parameter_names(self) -> List[str]:
        return [name for name, _ in self._deterministic]

    def point_estimates(self) -> Dict[str, torch.Tensor]:
        """The point-estimated parameters that Pyro's param store holds in place of the
        network's own (under ``"<model name>.<parameter>"``, registered there on first use as
        ``pyro.param`` does), keyed by parameter name."""
        values: Dict[str, torch.Tensor] = {}
        for name, p in self._deterministic:
            v = pyro.param(f"{self.name}.{name}", p)
            if v is not p:
                values[name] = v
        return values

    def sample_parameters(self) -> Dict[str, torch.Tensor]:
        """Runs the prior (a Pyro model); returns the value of every parameter that differs
        from the network's own (random ones, and point estimates the param store replaced)."""
        values = self.point_estimates()
        for module_name, module, params in self._random:
            for param_name, value in self.prior.sample_module(module_name, module, params).items():
                values[join_name(module_name, param_name)] = value
        return values

    def forward(self, x: torch.Tensor, y: Optional[torch.Tensor] = None, subsample: Optional[torch.Tensor] = None):
        out = self.net_output(self.sample_parameters(), x)
        self.likelihood(out, y, subsample)
        return out

    def net_output(self, values: Dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """The network's output with the parameters in ``values`` substituted."""
        return functional_call(self.net, values, (x,), strict=False)

    # -- direct evaluation (no effect stack; pyrozoo.inference.direct.DirectParticlesModel) --
    def latent_sites(self, x: torch.Tensor) -> Optional[List[Tuple[str, object]]]:
        """``[(site name, prior)]`` of every latent site this model would sample, in order,
        or ``None`` when the prior is structured (sites are not one per parameter) and does
        not list its sites itself (a ``latent_sites(module_name, module, params)`` method, whose
        priors may be functions of the values drawn before them, as
        :class:`~pyrozoo.models.compression_priors.GroupScalePrior`'s weights given their scales).

        With :meth:`log_likelihood`, this lets an objective evaluate exactly what Pyro would
        compute from a trace of :meth:`forward`, without running the effect stack on every
        site (see :mod:`pyrozoo.inference.direct`).
        """
        if self.prior.one_site_per_parameter:
            sites = [
                (join_name(module_name, param_name), self.prior.distribution(join_name(module_name, param_name), module, param))
                for module_name, module, params in self._random
                for param_name, param in params.items()
            ]
        else:
            listed = getattr(self.prior, "latent_sites", None)
            if listed is None:
                return None
            sites = [site for module_name, module, params in self._random for site in listed(module_name, module, params)]
        sites.extend(self.likelihood.latent_sites(x).values())
        return sites

    @staticmethod
    def split_args(x, y=None, subsample=None):
        """``(x, y, subsample)`` from the arguments a call of the model takes."""
        return x, y, subsample

    def log_likelihood(self, values: Dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, subsample: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The scaled log-likelihood ``(N/n) sum log p(y | x, values)`` given a value for
        every latent site (keyed by site name, as from :meth:`latent_sites`), and the point
        estimates :meth:`forward` would use (:meth:`point_estimates`)."""
        params = {**self.point_estimates(), **{name: values[name] for name in self._random_names}}
        out = self.net_output(params, x)
        latents = {key: values[name] for key, (name, _) in self.likelihood.latent_sites(out).items()}
        return self.likelihood.scaled_log_likelihood(out, y, latents)

    def log_likelihood_particles(self, values: Dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, subsample: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``(K,)`` scaled log-likelihoods :meth:`log_likelihood` of ``K`` parameter draws (the
        leading dim of every value in ``values``), with the network run on all of them at once
        by :func:`torch.func.vmap`."""
        params = {name: values[name] for name in self._random_names}
        fixed = self.point_estimates()  # shared by the particles
        out = torch.func.vmap(lambda p: self.net_output({**fixed, **p}, x))(params)
        likelihood = self.likelihood
        latents = {key: values[name] for key, (name, _) in likelihood.latent_sites(out[0]).items()}
        obs = likelihood.check_obs(out[0], y)
        # one precision per particle: Gaussian.predictive_distribution broadcasts a leading sample dim
        lp = likelihood.predictive_distribution(out, **latents).log_prob(obs)
        lp = lp.reshape(out.shape[0], -1).sum(-1)
        N, n = likelihood.dataset_size, out.shape[1]
        return lp if N is None else lp * (N / n)

    @property
    def dataset_size(self) -> Optional[int]:
        """The likelihood's number of examples in the full data set (``None``: not set)."""
        return self.likelihood.dataset_size
