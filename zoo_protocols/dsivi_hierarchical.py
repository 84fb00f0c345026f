"""Joint vs marginal inference for a BNN with a hierarchical prior (Molchanov 2022, Eqs. 17-20,
Theorem 3, Figure 6) on a UCI regression data set: the protocol of
``reproductions/dsivi_hierarchical_bnn.py``.

Prior ``w | lambda ~ N(0, 1/lambda)``, ``lambda ~ Gamma(a, b)``, one precision per weight; a
Gaussian likelihood with a Gamma prior on the noise precision. The methods are declarations
of :mod:`zoo_protocols.methods` (:data:`DECLARATIONS`): ``joint`` (``normal-gamma-joint``, Eq. 18),
``marginal`` (``normal-gamma-marginal``: lambda integrated out, the DSIVI bound from ``K2``
draws, Eq. 19) and ``marginal+SI`` (``dsivi``: the same with a semi-implicit posterior, ``K1``
guide draws). Every trained posterior ``q(w)`` is scored by the same quantity, the *marginal*
ELBO (:class:`Scorer`).
"""

import json

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.distributions.util import scale_and_mask

from pyrozoo import atomic
from pyrozoo.guides import MeanFieldNormalGuide, SemiImplicitGuide
from pyrozoo.inference import ClosedFormKL_ELBO, DSIVI_ELBO, evaluate, fit
from pyrozoo.models import MLP, BayesianNeuralNetwork, GaussianLikelihood, NormalGammaPrior
from pyrozoo.utils import rng_states_kept, set_seed
from zoo_protocols.config import RunConfig
from zoo_protocols.methods import method as declaration

#: this protocol's methods: name -> the declaration it evaluates
DECLARATIONS = {"joint": "normal-gamma-joint", "marginal": "normal-gamma-marginal", "marginal+SI": "dsivi"}
METHODS = tuple(DECLARATIONS)


def settings(spec, args):
    """The declaration's settings under the run's options (hyperprior, K1, K2, initial scales)."""
    extra = {"normal_gamma": (args.gamma_shape, args.gamma_rate), "K1": args.K1, "K2": args.K2, "init_scale": args.init_scale, "mixing_scale": args.init_scale}
    return RunConfig(extra=extra).settings(spec.defaults)


def make_model(split, prior, args):
    """The protocol's BNN: an MLP with one hidden layer, ``prior`` on its parameters, a Gaussian
    likelihood whose noise precision has a ``Gamma(noise_shape, noise_rate)`` prior."""
    net = MLP(split.num_features, [args.hidden or split.n_hidden], 1)
    likelihood = GaussianLikelihood(len(split.y_train), precision=dist.Gamma(args.noise_shape, args.noise_rate))
    return BayesianNeuralNetwork(net, prior, likelihood)


def scoring_model(split, form, args):
    """The BNN under the Normal-Gamma prior in ``form`` (``"exact"`` or ``"marginal"``) on which posteriors are scored."""
    return make_model(split, NormalGammaPrior(args.gamma_shape, args.gamma_rate, form=form, num_mixing=args.K2), args)


def copy_into(target: MeanFieldNormalGuide, source: MeanFieldNormalGuide, x, y):
    """``target`` (set up on another model) with the variational parameters of the sites it shares with ``source``."""
    target(x, y)
    with torch.no_grad():
        for key in target.locs:
            target.locs[key].copy_(source.locs[key])
            target.log_scales[key].copy_(source.log_scales[key])
    return target


class PairedExactELBO(ClosedFormKL_ELBO):
    """The exact marginal ELBO with ``-H[q]`` in place of ``log q(w)`` at sites without a closed-form
    KL, which is what :class:`DSIVI_ELBO` does for an explicit guide against a semi-implicit prior:
    on the same guide draws the exact value and the DSIVI bounds then differ only in ``log p(w)``
    (``log q(w)`` at a sample alone has a spread of ~sqrt(#weights / 2) nats)."""

    def _kl_term(self, guide_site, model_site):
        kl, at_sample = super()._kl_term(guide_site, model_site)
        if at_sample:
            q, z = guide_site["fn"], guide_site["value"]
            swap = DSIVI_ELBO._explicit_log_q(q, z) - q.log_prob(z)
            kl = kl + scale_and_mask(swap, guide_site["scale"], guide_site["mask"]).sum()
        return kl, at_sample


class Scorer:
    """The marginal ELBO (per training example) of a trained posterior over ``w``."""

    def __init__(self, split, args, x, y):
        self.args, self.x, self.y, self.n = args, x, y, len(x)
        seed_state = torch.random.get_rng_state()
        self.exact = scoring_model(split, "exact", args).to(x.device)
        self.marginal = scoring_model(split, "marginal", args).to(x.device)
        # the networks' own initial values only seed guides, which are overwritten: no RNG impact wanted
        torch.random.set_rng_state(seed_state)

    def weight_guide(self, spec, guide, model):
        """The posterior over ``w`` alone: a joint method's guide also covers lambda."""
        if spec.hierarchy == "joint":
            return copy_into(MeanFieldNormalGuide(model), guide, self.x, self.y)
        return guide

    @torch.no_grad()
    def __call__(self, spec, guide, particles, k, seed=0):
        # its own seed, then every stream back as it was: a curve point taken during training
        # must not move training's draws (it reseeded them, so the runs depended on --curve-every)
        with rng_states_kept():
            return self._score(spec, guide, particles, k, seed)

    def _score(self, spec, guide, particles, k, seed):
        # Common random numbers: every estimate is evaluated on the same posterior draws
        # (one guide trace per particle, replayed into each model) with the same log q(w) term,
        # so their differences (exact vs lower vs upper differ only in how log p(w) is
        # estimated) are not buried in the Monte Carlo noise of the likelihood and of log q.
        pyro.set_rng_seed(seed)
        g = self.weight_guide(spec, guide, self.marginal)
        lower, upper, exact = DSIVI_ELBO(k, k), DSIVI_ELBO(k, k, bound="upper"), PairedExactELBO()
        sums = {"elbo_dsivi_lower": 0.0, "elbo_dsivi_upper": 0.0}
        if not isinstance(guide, SemiImplicitGuide):  # the exact value needs log q(w) in closed form
            sums["elbo_exact"] = 0.0
        for _ in range(particles):
            guide_trace = poutine.trace(g).get_trace(self.x, self.y)
            replayed = poutine.trace(poutine.replay(self.marginal, trace=guide_trace)).get_trace(self.x, self.y)
            sums["elbo_dsivi_lower"] += float(lower.elbo_particle(replayed, guide_trace))
            sums["elbo_dsivi_upper"] += float(upper.elbo_particle(replayed, guide_trace))
            if "elbo_exact" in sums:
                replayed = poutine.trace(poutine.replay(self.exact, trace=guide_trace)).get_trace(self.x, self.y)
                sums["elbo_exact"] += float(exact.elbo_particle(replayed, guide_trace))
        return {key: value / (particles * self.n) for key, value in sums.items()}


def train(method, split, seed, args, device):
    """Trains ``method`` (a name of :data:`DECLARATIONS`) on ``split`` and scores it: ``(row, curve)``,
    the curve being the marginal ELBO every ``args.curve_every`` epochs."""
    spec = declaration(DECLARATIONS[method])
    s = settings(spec, args)
    pyro.clear_param_store()
    set_seed(seed)
    model = make_model(split, spec.prior(s), args).to(device)
    guide = spec.guide(model, s)
    x, y = split.x_train, split.y_train.unsqueeze(-1)
    scorer = Scorer(split, args, x, y)
    curve = []

    def record(epoch, row):
        if (epoch + 1) % args.curve_every == 0:
            curve.append({"method": method, "split": split.split, "epoch": epoch + 1, **scorer(spec, guide, args.curve_particles, args.curve_k)})

    checkpoint = None
    if args.checkpoint_dir is not None:
        # resumable: fit continues from the last saved epoch; the curve points so far live beside it
        checkpoint = args.checkpoint_dir / f"{args.run_name}_{method}_split{split.split}_K1{args.K1}_K2{args.K2}.pt"
        curve_file = checkpoint.with_suffix(".curve.json")
        if checkpoint.exists() and curve_file.exists():
            try:
                curve.extend(json.loads(curve_file.read_text()))
            except json.JSONDecodeError as e:  # a file cut short is not a curve
                raise ValueError(f"{curve_file} is not a complete curve ({e}): delete it and {checkpoint} to train the run again") from None
        inner = record

        def record(epoch, row):
            inner(epoch, row)
            if (epoch + 1) % args.checkpoint_every == 0:  # in step with the checkpoint just saved
                atomic.write_text(curve_file, json.dumps(curve))

    history = fit(
        model, guide, (x, y), epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, device=device,
        seed=seed, progress=False, callback=record, checkpoint=checkpoint, checkpoint_every=args.checkpoint_every,
        **spec.fit_arguments(s, args.epochs),
    )
    seconds = float(history["seconds"].sum())  # optimisation time over all epochs, also across resumes
    scores = scorer(spec, guide, args.eval_particles, args.eval_k, seed=seed)
    if spec.hierarchy == "joint":
        # the joint model's own bound (Eq. 18), looser than the marginal ELBO
        pyro.set_rng_seed(seed)
        scores["elbo_joint"] = -ClosedFormKL_ELBO(num_particles=args.eval_particles).loss(model, guide, x, y) / len(x)
    pyro.set_rng_seed(seed)
    metrics = evaluate(model, guide, split.x_test, split.y_test, num_samples=args.num_samples, y_scale=split.y_std, y_shift=split.y_mean)
    return {"method": method, "split": split.split, **scores, **metrics, "train_seconds": seconds}, curve
