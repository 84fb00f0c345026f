"""Deep ensembles (Lakshminarayanan, Pritzel & Blundell, "Simple and Scalable Predictive
Uncertainty Estimation using Deep Ensembles", NeurIPS 2017).

``M`` networks of the same architecture, each initialised independently (its own seed) and
trained on its own shuffling of the data; the predictive is the equal-weight mixture of the
members' predictives (the paper's eq. 4 for classification, the mixture of Gaussians of
Section 2.4 for regression),

    p(y | x) = (1/M) sum_m p(y | f_m(x), tau_m).

Each member is fitted by :func:`~pyrozoo.baselines.training.train_map`: maximum likelihood
(``prior_scale=None``, as in the paper) or, by default, MAP under the zoo's ``N(0, 1)``
weight prior. For regression each member learns its own noise precision ``tau_m`` as the
zoo's UCI protocol does (a homoscedastic Gaussian with a ``Gamma`` prior on the precision),
so the mixture is scored by the same :class:`~pyrozoo.models.GaussianLikelihood` likelihood; the
members' spread is the epistemic part of the uncertainty, their noise the aleatoric part.
(The paper's heteroscedastic variance head and adversarial training are not used.)
"""

from typing import Callable, Dict, Optional, Sequence, Tuple

import torch
from torch import nn

from pyrozoo.baselines.predictive import Baseline, check_likelihood
from pyrozoo.baselines.training import NoisePrecision, train_map
from pyrozoo.models.likelihoods import Likelihood

__all__ = ["DeepEnsemble"]


class DeepEnsemble(Baseline):
    """An ensemble of independently initialised and trained networks.

    :param make_net: ``() -> nn.Module``, called once per member after seeding torch's
        generator with ``seed + m`` (so members differ in their initialisation).
    :param likelihood: a :class:`~pyrozoo.models.GaussianLikelihood` (a precision prior: each member
        learns its noise precision; a fixed precision: all share it) or a
        :class:`~pyrozoo.models.CategoricalLikelihood`.
    :param num_members: ``M`` (5 in the paper).
    """

    def __init__(self, make_net: Callable[[], nn.Module], likelihood: Likelihood, num_members: int = 5):
        if isinstance(num_members, bool) or not isinstance(num_members, int) or num_members < 1:
            raise ValueError(f"num_members must be an int >= 1, got {num_members!r}")
        self.make_net = make_net
        self.likelihood = check_likelihood(likelihood)
        self.num_members = num_members
        self.members: Sequence[nn.Module] = []
        self.noises: Sequence[NoisePrecision] = []

    @classmethod
    def from_members(cls, members: Sequence[nn.Module], likelihood: Likelihood, noises: Optional[Sequence[NoisePrecision]] = None) -> "DeepEnsemble":
        """An ensemble of networks trained elsewhere (``noises``: each member's fitted noise
        precision, when the likelihood has a precision prior)."""
        members = list(members)
        ensemble = cls(lambda: None, likelihood, len(members))
        if noises is None:
            noises = [NoisePrecision(ensemble.likelihood) for _ in members]
        if len(noises) != len(members):
            raise ValueError(f"from_members: {len(members)} members but {len(noises)} noise precisions; pass one per member")
        ensemble.members, ensemble.noises = members, list(noises)
        return ensemble

    def fit(
        self, x: torch.Tensor, y: torch.Tensor, *, epochs: int, batch_size: int, lr: float,
        lr_schedule: Optional[Callable[[int], float]] = None, prior_scale: Optional[float] = 1.0, seed: int = 0,
    ) -> "DeepEnsemble":
        """Trains the ``M`` members one after the other, each for ``epochs`` epochs
        (:func:`~pyrozoo.baselines.training.train_map`; member ``m`` is initialised and its
        minibatches shuffled with seed ``seed + m``)."""
        members, noises = [], []
        for m in range(self.num_members):
            torch.manual_seed(seed + m)
            net = self.make_net().to(x.device, x.dtype)
            noises.append(train_map(net, self.likelihood, x, y, epochs=epochs, batch_size=batch_size, lr=lr, lr_schedule=lr_schedule, prior_scale=prior_scale, seed=seed + m))
            members.append(net)
        self.members, self.noises = members, noises
        return self

    def sample_outputs(self, x: torch.Tensor, num_samples: int = 100) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        """The members' outputs ``(M, n, ...)``: the mixture is exact with its ``M``
        components, so ``num_samples`` is not used."""
        if not self.members:
            raise RuntimeError("DeepEnsemble: no members yet; call fit(x, y, ...) first (or build it with from_members)")
        with torch.no_grad():
            f = torch.stack([net.eval()(x) for net in self.members])
            latents = [noise.latents() for noise in self.noises]
        if latents and latents[0]:
            return f, {key: torch.stack([lat[key] for lat in latents]).detach() for key in latents[0]}
        return f, {}
