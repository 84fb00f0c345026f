r"""A variational autoencoder with a swappable latent prior, as a Pyro model and guide.

``VAE(decoder, prior, dataset_size)`` is the model ``z ~ prior``, ``x ~ Bernoulli(logits =
decoder(z))`` under the data plate; :class:`AmortizedNormalGuide` is ``q(z | x) = N(loc(x),
diag exp(log_scale(x))^2)`` from a :class:`GaussianEncoder`. The priors:

* :class:`StandardNormalLatentPrior`: ``N(0, I)``;
* :class:`VampPrior`: ``(1/K) Σ_k q(z | u_k)`` with learned pseudo-inputs ``u_k``
  (Molchanov 2022, Eq. 22), evaluated exactly;
* :class:`AggregatedPosteriorPrior`: ``(1/N) Σ_n q(z | x_n)`` over the training inputs
  (Eq. 21), a semi-implicit prior whose density DSIVI estimates from ``K`` sampled training
  points per step.

The last two are :class:`~pyrozoo.distributions.SemiImplicit` distributions over a
:class:`~pyrozoo.distributions.FiniteMixing` of encoder outputs; the objective
(:class:`~pyrozoo.inference.ClosedFormKL_ELBO` or :class:`~pyrozoo.inference.DSIVI_ELBO`)
treats them like any other prior site.
"""

import math
from typing import Callable, Optional

import pyro
import pyro.distributions as dist
import torch
from torch import nn
from torch.nn import functional as F

from pyrozoo.distributions import FiniteMixing, LogScaleNormal, SemiImplicit, semi_implicit_role


def _data_plate(dataset_size: Optional[int], n: int, subsample: Optional[torch.Tensor], device):
    if dataset_size is None:
        return pyro.plate("data", n, device=device)
    if n > dataset_size:
        raise ValueError(f"batch of {n} examples is larger than dataset_size={dataset_size}")
    if subsample is None:
        subsample = torch.arange(n, device=device)
    elif len(subsample) != n:
        raise ValueError(f"subsample has {len(subsample)} indices for a batch of {n}")
    return pyro.plate("data", dataset_size, subsample=subsample)


def _diagonal_normal(psi):
    loc, log_scale = psi
    return LogScaleNormal(loc, log_scale).to_event(1)


class GaussianEncoder(nn.Module):
    """``x -> (loc, log_scale)`` of a diagonal Gaussian over ``latent_dim`` dimensions.

    :param nn.Module net: maps flattened inputs to ``2 * latent_dim`` outputs.
    :param log_scale_bounds: the log standard deviation is clamped to this range (as
        VampPrior's encoder clamps its log-variance to [-6, 2]), which keeps a tiny
        variance from making the objective explode early in training.
    """

    def __init__(self, net: nn.Module, latent_dim: int, log_scale_bounds=(-3.0, 1.0)):
        super().__init__()
        if latent_dim <= 0:
            raise ValueError(f"latent_dim must be positive, got {latent_dim}")
        self.net = net
        self.latent_dim = int(latent_dim)
        self.log_scale_bounds = tuple(float(b) for b in log_scale_bounds)

    def forward(self, x: torch.Tensor):
        out = self.net(x.flatten(1))
        if out.shape[-1] != 2 * self.latent_dim:
            raise ValueError(f"the encoder network returned {out.shape[-1]} outputs, expected 2 * latent_dim = {2 * self.latent_dim}")
        loc, log_scale = out.split(self.latent_dim, -1)
        return loc, F.hardtanh(log_scale, *self.log_scale_bounds)


class AmortizedNormalGuide(nn.Module):
    """The guide ``q(z | x) = N(loc(x), diag scale(x)^2)`` of a :class:`VAE`."""

    def __init__(self, encoder: GaussianEncoder, dataset_size: Optional[int] = None):
        super().__init__()
        self.encoder = encoder
        self.dataset_size = dataset_size

    def distribution(self, x: torch.Tensor):
        return _diagonal_normal(self.encoder(x))

    def forward(self, x, y=None, subsample=None):
        q = self.distribution(x)
        with _data_plate(self.dataset_size, x.shape[0], subsample, x.device):
            return pyro.sample("z", q)


class StandardNormalLatentPrior(nn.Module):
    """``z ~ N(0, I)``."""

    def __init__(self, latent_dim: int):
        super().__init__()
        self.latent_dim = int(latent_dim)
        self.register_buffer("_zero", torch.zeros(()))

    def distribution(self) -> dist.Distribution:
        zero = self._zero.expand(self.latent_dim)
        return dist.Normal(zero, 1.0).to_event(1)


class VampPrior(nn.Module):
    r"""VampPrior: ``(1/K) Σ_k q(z | u_k)`` with learned pseudo-inputs (Tomczak & Welling 2018;
    Molchanov 2022, Eq. 22). Pseudo-inputs are ``hardtanh(w_k, 0, 1)`` of free parameters
    ``w_k``, initialised at ``N(0.05, 0.01^2)`` as in the VampPrior paper's code, or from data.

    :param encoder: the guide's encoder (shared: the prior moves with it).
    :param int num_components: ``K``.
    :param input_shape: shape of one input.
    :param init: optional ``(K, *input_shape)`` initial pseudo-inputs (e.g. training points).
    """

    def __init__(self, encoder: GaussianEncoder, num_components: int, input_shape, init: Optional[torch.Tensor] = None):
        super().__init__()
        if num_components <= 0:
            raise ValueError(f"num_components must be positive, got {num_components}")
        self.encoder = encoder
        shape = (int(num_components),) + tuple(input_shape)
        if init is None:
            init = 0.05 + 0.01 * torch.randn(shape)
        elif tuple(init.shape) != shape:
            raise ValueError(f"init must have shape {shape}, got {tuple(init.shape)}")
        self.pseudo_inputs = nn.Parameter(init.detach().clone().float())

    def atoms(self, idx):
        return self.encoder(F.hardtanh(self.pseudo_inputs.index_select(0, idx), 0.0, 1.0))

    def distribution(self) -> SemiImplicit:
        K = self.pseudo_inputs.shape[0]
        mixing = FiniteMixing(self.atoms, size=K, device=self.pseudo_inputs.device)
        return SemiImplicit(mixing, _diagonal_normal, (self.encoder.latent_dim,), num_mixing=None)


class AggregatedPosteriorPrior(nn.Module):
    r"""The aggregated posterior ``p(z) = (1/N) Σ_n q(z | x_n)`` over the training inputs
    (Molchanov 2022, Eq. 21) as a semi-implicit prior with uniform mixing over data points.

    Under :class:`~pyrozoo.inference.DSIVI_ELBO` its density is estimated from ``K2`` data
    points per step (shared by the minibatch): an ``O(K)`` instead of ``O(N)`` cost.

    :param encoder: the guide's encoder.
    :param data: the ``N`` training inputs (not a parameter; moves with the module).
    :param int num_mixing: default ``K`` of the estimate.
    :param transform: optional function applied to sampled inputs before encoding (e.g. a
        random binarisation, which makes the mixing over ``(n, binarisation)``).
    """

    def __init__(self, encoder: GaussianEncoder, data: torch.Tensor, num_mixing: int = 500, transform: Optional[Callable] = None):
        super().__init__()
        if data.dim() < 2 or data.shape[0] == 0:
            raise ValueError("data must hold at least one input, shape (N, ...)")
        self.encoder = encoder
        self.register_buffer("data", data, persistent=False)
        self.num_mixing = int(num_mixing)
        self.transform = transform

    def atoms(self, idx):
        x = self.data.index_select(0, idx.to(self.data.device))
        if self.transform is not None:
            x = self.transform(x)
        return self.encoder(x)

    def distribution(self) -> SemiImplicit:
        mixing = FiniteMixing(self.atoms, size=self.data.shape[0], device=self.data.device)
        return SemiImplicit(mixing, _diagonal_normal, (self.encoder.latent_dim,), num_mixing=self.num_mixing, share_mixing=True)

    @torch.no_grad()
    def empirical_distribution(self, num_points: Optional[int] = None, *, chunk_size: int = 4096) -> SemiImplicit:
        """An explicit mixture of ``q(z | x_j)`` for evaluation.

        ``num_points=None`` takes every training input once: the aggregated posterior itself
        (Eq. 21, evaluated exactly as the thesis does at test time) when there is no random
        ``transform``, and with one (e.g. a random binarisation) a single draw of it per input.
        An integer draws that many training points with replacement. In both random cases
        the mixture's density is an unbiased estimate of this prior's density at every
        ``z``, so importance-sampled log-likelihoods with it are lower bounds in
        expectation, tighter the more points are used.

        :param int chunk_size: atoms per chunk when the density is evaluated (bounds memory).
        """
        n = self.data.shape[0]
        if num_points is None:
            idx = torch.arange(n, device=self.data.device)
        else:
            if isinstance(num_points, bool) or not isinstance(num_points, int) or num_points < 1:
                raise ValueError(f"num_points must be a positive int or None (all {n} training points), got {num_points!r}")
            idx = torch.randint(n, (num_points,), device=self.data.device)
        parts = [self.atoms(chunk) for chunk in idx.split(chunk_size)]
        loc = torch.cat([p[0] for p in parts])
        log_scale = torch.cat([p[1] for p in parts])
        return SemiImplicit(FiniteMixing((loc, log_scale)), _diagonal_normal, (self.encoder.latent_dim,), num_mixing=None, chunk_size=chunk_size)

    @torch.no_grad()
    def estimate_gap(self, z: torch.Tensor, num_mixing: Optional[int] = None, *, repeats: int = 10) -> torch.Tensor:
        r"""Per-value :math:`\log p(z) - \mathbb E \log \hat p_K(z)`: how far the DSIVI prior-side
        estimate from ``K = num_mixing`` sampled training points (shared by all values, as in
        training) falls below the density over all training points, averaged over ``repeats``
        independent estimates: the looseness, in nats per data point, that the prior term adds
        to the DSIVI bound (Eq. 14). With a random transform of the points (e.g. dynamic
        binarisation) the all-points density is itself one random realisation, below
        :math:`\log p(z)` in expectation, so the gap is then a lower estimate of the looseness
        and no longer non-negative by Jensen alone.
        """
        if repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {repeats}")
        k = self.num_mixing if num_mixing is None else num_mixing
        full = self.empirical_distribution(None).log_prob(z)
        prior = self.distribution()
        estimates = torch.stack([prior.log_prob_estimate(z, k) for _ in range(repeats)])
        return full - estimates.mean(0)


class VAE(nn.Module):
    """``z ~ prior``, ``x ~ Bernoulli(logits = decoder(z))`` (the model; see the module docstring).

    :param nn.Module decoder: ``(n, latent_dim) -> (n, *input_shape)`` logits.
    :param prior: a module with ``distribution()`` returning ``p(z)`` (event ``(latent_dim,)``).
    :param int dataset_size: ``N``; the data plate scales a minibatch by ``N / n``.
    """

    def __init__(self, decoder: nn.Module, prior: nn.Module, dataset_size: Optional[int] = None):
        super().__init__()
        if not hasattr(prior, "distribution"):
            raise TypeError("prior must provide distribution()")
        self.decoder = decoder
        self.prior = prior
        self.dataset_size = dataset_size

    def forward(self, x, y=None, subsample=None):
        x = x.flatten(1)
        p = self.prior.distribution()
        with _data_plate(self.dataset_size, x.shape[0], subsample, x.device):
            z = pyro.sample("z", p)
            pyro.sample("x", dist.Bernoulli(logits=self.decode(z)).to_event(1), obs=x)
        return z

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Flattened logits for latent codes with any leading dimensions (particles, samples)."""
        logits = self.decoder(z.reshape(-1, z.shape[-1]))
        return logits.reshape(z.shape[:-1] + (-1,))

    @torch.no_grad()
    def log_likelihood(self, guide: AmortizedNormalGuide, x: torch.Tensor, num_samples: int = 5000, *, batch_size: int = 100, sample_chunk: int = 500, prior_points: Optional[int] = None) -> torch.Tensor:
        r"""Per-example importance-sampling estimate :math:`\log \frac1S \sum_s p(x \mid z_s) p(z_s) / q(z_s \mid x)`
        with ``S = num_samples`` draws from the guide (Burda et al. 2016's bound; exact as ``S -> inf``).

        With an :class:`AggregatedPosteriorPrior`, ``p(z)`` is the mixture of
        :meth:`AggregatedPosteriorPrior.empirical_distribution`, fresh per batch: over all
        training points (``prior_points=None``, exact without a random transform) or over
        ``prior_points`` sampled ones. A random mixture is unbiased for ``p(z)``, so the result
        is then a lower bound in expectation (why this repository's table reports it with "≥").
        """
        if num_samples < 1:
            raise ValueError("num_samples must be >= 1")
        out = []
        for xb in torch.split(x.flatten(1), batch_size):
            if isinstance(self.prior, AggregatedPosteriorPrior):
                p = self.prior.empirical_distribution(prior_points)
            else:
                p = self.prior.distribution()
            q = guide.distribution(xb)
            chunks = []
            for s in range(0, num_samples, sample_chunk):
                z = q.sample((min(sample_chunk, num_samples - s),))
                with semi_implicit_role("model"):
                    log_p = p.log_prob(z)
                log_w = dist.Bernoulli(logits=self.decode(z)).to_event(1).log_prob(xb) + log_p - q.log_prob(z)
                chunks.append(log_w)
            log_w = torch.cat(chunks, 0)
            out.append(torch.logsumexp(log_w, 0) - math.log(num_samples))
        return torch.cat(out)
