"""Fitting a semi-implicit posterior to a known semi-implicit target (the synthetic comparison
of Molchanov 2022, Figure 5; the thesis does not give its target, so this one is ours): the
protocol of ``reproductions/dsivi_toy.py``.

Target: a correlated multivariate Student-t written as a Gaussian scale mixture,
``lambda ~ Gamma(nu/2, nu/2)``, ``z | lambda ~ N(0, Sigma/lambda)``. Posterior family:
``tau ~ Gamma(alpha, beta)``, ``z | tau ~ N(mu, diag(s^2)/tau)`` with learnable mu, s, alpha,
beta. Both are scale mixtures with closed-form marginals (multivariate t), which gives the
exact KL(q || p) by which every fit is scored.

The problem is its own (a target and a family rather than a network, prior and guide); a
method is a declaration of :mod:`zoo_protocols.methods` that supplies the objective and, through its
``hierarchy``, how both scale mixtures enter: ``"exact"`` (``normal-gamma-exact``, "MC KL":
their closed-form marginals, exact log-densities at samples) or ``"marginal"`` (``dsivi``:
their semi-implicit forms, ``K1`` mixing draws of the family plus the generating one, ``K2`` of
the target; K1 = K2 = K here).
"""

import math
import time

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions.transforms import LowerCholeskyAffine
from torch import nn

from pyrozoo.distributions import ExplicitMixing, SemiImplicit
from pyrozoo.utils import set_seed
from zoo_protocols.config import RunConfig
from zoo_protocols.methods import method as declaration

#: the baseline's label -> its declaration; the DSIVI runs are labelled by their K
EXACT = ("MC KL", "normal-gamma-exact")
DSIVI = "dsivi"


class Target:
    """Multivariate t with ν degrees of freedom and an equicorrelated scale matrix."""

    def __init__(self, dim, df, correlation, device, dtype):
        kw = dict(device=device, dtype=dtype)
        sigma = (1 - correlation) * torch.eye(dim, **kw) + correlation * torch.ones(dim, dim, **kw)
        self.tril = torch.linalg.cholesky(sigma)
        self.df = torch.tensor(float(df), **kw)
        self.dim = dim

    def semi_implicit(self, k):
        half = self.df / 2
        zero = torch.zeros(self.dim, dtype=self.tril.dtype, device=self.tril.device)
        whiten = LowerCholeskyAffine(zero, self.tril)

        def conditional(lam):
            # N(0, Σ/λ) as L·N(0, I/λ): the whitening L⁻¹z is then computed once per value,
            # not once per mixing draw
            white = dist.Normal(zero, lam.rsqrt().unsqueeze(-1)).to_event(1)
            return dist.TransformedDistribution(white, whiten)

        return SemiImplicit(ExplicitMixing(dist.Gamma(half, half)), conditional, (self.dim,), num_mixing=k)

    def explicit(self):
        return dist.MultivariateStudentT(self.df, torch.zeros(self.dim, dtype=self.tril.dtype, device=self.tril.device), self.tril)


class ScaleMixturePosterior(nn.Module):
    """``τ ~ Gamma(α, β)``, ``z | τ ~ N(μ, diag(s²)/τ)``; marginally ``t_{2α}(μ, diag(s² β/α))``."""

    def __init__(self, dim):
        super().__init__()
        self.loc = nn.Parameter(0.5 * torch.randn(dim))
        self.log_scale = nn.Parameter(torch.zeros(dim))
        self.log_alpha = nn.Parameter(torch.tensor(1.0))
        self.log_beta = nn.Parameter(torch.tensor(1.0))

    def semi_implicit(self, k):
        alpha, beta, scale = self.log_alpha.exp(), self.log_beta.exp(), self.log_scale.exp()
        return SemiImplicit(
            ExplicitMixing(dist.Gamma(alpha, beta).expand([1])),
            lambda tau: dist.Normal(self.loc, scale * tau.rsqrt()).to_event(1),
            (self.loc.shape[0],),
            num_mixing=k,
        )

    def explicit(self):
        alpha, beta = self.log_alpha.exp(), self.log_beta.exp()
        tril = torch.diag_embed(self.log_scale.exp() * (beta / alpha).sqrt())
        return dist.MultivariateStudentT(2 * alpha, self.loc, tril)


@torch.no_grad()
def exact_kl(q: ScaleMixturePosterior, target: Target, n=200_000, chunk=50_000):
    """Monte Carlo estimate of KL(q || p) from the closed-form marginals: ``(mean, standard error)``."""
    qd, pd_ = q.explicit(), target.explicit()
    vals = []
    for _ in range(n // chunk):
        z = qd.sample((chunk,))
        vals.append(qd.log_prob(z) - pd_.log_prob(z))
    v = torch.cat(vals)
    return float(v.mean()), float(v.std() / math.sqrt(v.numel()))


def planned_runs(ks):
    """``[(label, declaration, K), ...]``: the exact baseline, then DSIVI with K1 = K2 = K for each K."""
    return [(EXACT[0], EXACT[1], 0)] + [(f"DSIVI K={k}", DSIVI, k) for k in ks]


def problem_model_and_guide(spec, s, target: Target, q: ScaleMixturePosterior):
    """The Pyro model and guide of one ``z`` site in the forms ``spec.hierarchy`` gives them."""
    if spec.hierarchy == "exact":
        return (lambda: pyro.sample("z", target.explicit())), (lambda: pyro.sample("z", q.explicit()))
    if spec.hierarchy == "marginal":
        k1, k2 = int(s["K1"]), int(s["K2"])
        return (lambda: pyro.sample("z", target.semi_implicit(k2))), (lambda: pyro.sample("z", q.semi_implicit(k1)))
    raise ValueError(f"the DSIVI toy fits scale mixtures exactly or marginally; method {spec.name!r} treats them {spec.hierarchy!r}")


def fit_one(label, name, k, dim, seed, args, device, dtype):
    """Fits the family to the target with the declaration ``name`` (K1 = K2 = ``k``) for
    ``args.steps`` Adam steps from ``seed``: ``(row, curve)``, the curve being the exact KL
    every ``args.eval_every`` steps."""
    spec = declaration(name)
    extra = {"K1": k, "K2": k, "num_particles": args.particles, "vectorize_particles": True, "max_plate_nesting": 1}
    s = RunConfig(extra=extra).settings(spec.defaults)
    set_seed(seed)
    pyro.clear_param_store()
    target = Target(dim, args.df, args.correlation, device, dtype)
    q = ScaleMixturePosterior(dim).to(device=device, dtype=dtype)
    model, guide = problem_model_and_guide(spec, s, target, q)
    objective = spec.objective(s)
    opt = torch.optim.Adam(q.parameters(), lr=args.lr)
    curve = []
    t0 = time.perf_counter()
    for step in range(args.steps):
        loss = objective.differentiable_loss(model, guide)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            curve.append((step + 1, exact_kl(q, target, n=args.eval_samples, chunk=min(args.eval_samples, 50_000))[0]))
    seconds = time.perf_counter() - t0
    kl, kl_se = exact_kl(q, target, n=args.final_samples, chunk=min(args.final_samples, 50_000))
    return {"method": label, "K": k, "dim": dim, "seed": seed, "kl": kl, "kl_mc_se": kl_se, "seconds": seconds}, curve
