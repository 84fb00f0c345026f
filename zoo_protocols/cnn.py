"""The 2-Conv-2-FC CNN protocol on MNIST / Fashion-MNIST (Deng et al. 2019, Sec. 5.2-5.3,
Table 2, Fig. 2): the methods ``reproductions/classify_cnn.py`` runs, evaluated from their
declarations (:mod:`zoo_protocols.methods`).

* ``adam`` / ``dropout``: the ``map`` declaration (Delta guide, ``N(0, prior_scale^2)``
  prior) on the network without / with 50% dropout after FC1, trained with Adam;
* ``sghmc``: the ``sghmc-ssgl`` declaration (SSGL model, latent variables fixed at their
  empirical-Bayes start); ``sghmc-sa``: the ``sghmc-sa`` declaration (stochastic
  approximation of the latent variables) — both with this protocol's SSGL settings
  (:func:`protocol_settings`: FC1's weights sparse, v0 = 1, v1 = 0.1, sigma = 1,
  nu = lambda = 1000, a = b = p, omega_k = (k + 1000)^(-3/4)).

A run's settings come from the example's parsed options (``args``: ``epochs``,
``batch_size``, ``lr``, ``adam_lr``, ``tau``, ``thin``, ``burn_in``, ``burn_in_epochs``,
``v0``, ``v1``, ``prior_scale``, ``seed``, ``dataset``, ``num_classes``, ``no_progress``).

A user's images run when they have MNIST's shape, ``1 x 28 x 28`` (:data:`INPUT_SHAPE`: the
network's first fully connected layer reads 64 maps of 7 x 7), with the network's output
sized to their classes; their inverse temperature is MNIST's unless ``tau`` is given.
"""

import math

import torch

from pyrozoo import atomic, metrics
from pyrozoo.data import load_mnist
from pyrozoo.inference import fit
from pyrozoo.inference.posterior_averaging import StepSizeWeightedAverage, ensemble_probs
from pyrozoo.inference.sample_storage import DiskSamples
from pyrozoo.inference.sgmcmc import model_output
from pyrozoo.models import BayesianNeuralNetwork, CategoricalLikelihood, TwoConvTwoFCNet
from pyrozoo.robustness import fgsm_accuracy
from zoo_protocols.config import RunConfig
from zoo_protocols.methods import method as declaration

#: this protocol's methods: name -> the declaration it evaluates
DECLARATIONS = {"adam": "map", "dropout": "map", "sghmc": "sghmc-ssgl", "sghmc-sa": "sghmc-sa"}
METHODS = tuple(DECLARATIONS)
DATASETS = {"mnist": "MNIST", "fashion": "Fashion-MNIST"}
#: the one input shape the network takes (:class:`~pyrozoo.models.TwoConvTwoFCNet`), and its classes on the bundled sets
INPUT_SHAPE, NUM_CLASSES = (1, 28, 28), 10
NETWORK = "the 2-Conv-2-FC CNN"
#: Deng et al.'s inverse temperatures; a user's data set takes MNIST's
TAU = {"mnist": 1000.0, "fashion": 2500.0}
#: Deng et al. (2019), Table 2 (accuracy %, no data augmentation): Vanilla, Dropout, SGHMC, SGHMC-SA
PUBLISHED = {("adam", "mnist"): 99.31, ("dropout", "mnist"): 99.38, ("sghmc", "mnist"): 99.47, ("sghmc-sa", "mnist"): 99.59,
             ("adam", "fashion"): 92.73, ("dropout", "fashion"): 92.81, ("sghmc", "fashion"): 92.88, ("sghmc-sa", "fashion"): 93.01}
EPSILONS = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
FGSM_PROTOCOLS = ("posterior", "authors")


def is_sampler(method: str) -> bool:
    """Whether ``method`` samples (its run has thinning and burn-in) rather than fits a point estimate."""
    return declaration(DECLARATIONS[method]).is_sampler


def run(method, data, args, device, run_dir):
    """Runs ``method`` (its declaration decides how): ``(metrics, Predictor)``, or
    ``(None, None)`` for a sampler leg that ends before its first averaged sample."""
    runner = run_sampler if is_sampler(method) else run_point_estimate
    return runner(method, data, args, device, run_dir)


def load(dataset, data_dir, quick, device, images=None):
    """``(x, y, x_test, y_test)`` on ``device``: the bundled ``dataset``, or ``images`` (a
    user's :class:`~pyrozoo.data.ClassificationSplit`, of :data:`INPUT_SHAPE`); ``quick``: the
    first 512 training and 256 test examples."""
    if images is not None:
        x, y, x_test, y_test = images.x_train, images.y_train, images.x_test, images.y_test
    else:
        x, y = load_mnist(dataset, train=True, data_dir=data_dir)
        x_test, y_test = load_mnist(dataset, train=False, data_dir=data_dir)
    if quick:
        x, y, x_test, y_test = x[:512], y[:512], x_test[:256], y_test[:256]
    return x.to(device), y.to(device), x_test.to(device), y_test.to(device)


def chunked_probs(probs_fn, x, chunk=1000):
    return torch.cat([probs_fn(part) for part in x.split(chunk)])


def scores(probs, y):
    return {
        "accuracy": 100.0 * metrics.accuracy(probs, y),
        "test_ll": float(probs.gather(1, y[:, None]).clamp_min(torch.finfo(probs.dtype).tiny).log().mean()),
        "ece": metrics.expected_calibration_error(probs, y),
    }


def run_point_estimate(method, data, args, device, run_dir):
    """Adam (MAP under N(0, 1)) with or without dropout; returns metrics and a :class:`Predictor`."""
    x, y, x_test, y_test = data
    spec = declaration(DECLARATIONS[method])
    s = RunConfig().settings({"prior_scale": args.prior_scale}, spec.defaults)
    net = TwoConvTwoFCNet(num_classes=args.num_classes, dropout=0.5 if method == "dropout" else 0.0).to(device)
    model = BayesianNeuralNetwork(net, spec.prior(s), CategoricalLikelihood(len(x)))
    guide = spec.guide(model, s)
    net.train()
    history = fit(model, guide, (x, y), epochs=args.epochs, batch_size=args.batch_size, lr=args.adam_lr, device=device, seed=args.seed,
                  checkpoint=run_dir / "checkpoint.pt", progress=not args.no_progress)
    net.eval()
    values = {name: v.detach() for name, v in guide.median().items()}

    predictor = Predictor(model, [values], [1.0])
    with torch.no_grad():
        probs = chunked_probs(predictor.probs, x_test)
    # over every leg of a run that was resumed
    return {**scores(probs, y_test), "samples": 1, "train_seconds": float(history.seconds.sum())}, predictor


def protocol_settings(net, args) -> dict:
    """Deng et al.'s CNN settings of the SSGL model and its SA step (over the declarations'):
    FC1's weights sparse, a = b = p (their number), nu = lambda = 1000, omega_k = (k + 1000)^(-3/4)."""
    p = net.fc1.weight.numel()
    return {
        "sparse": {"expose_modules": ["fc1"], "hide_parameters": ["bias"]}, "v0": args.v0, "v1": args.v1,
        "bias_scale": args.prior_scale, "nu": 1000.0, "lam": 1000.0, "a": float(p), "b": float(p), "sigma": 1.0,
        "omega": (1.0, 0.75, 1000.0), "momentum": 0.9,
    }


def sampler_model(method, x, args, device):
    """The SSGL model of ``method``'s declaration and its sampler's adaptations."""
    spec = declaration(DECLARATIONS[method])
    net = TwoConvTwoFCNet(num_classes=args.num_classes).to(device)
    s = RunConfig().settings(protocol_settings(net, args), spec.defaults)
    model = BayesianNeuralNetwork(net, spec.prior(s), CategoricalLikelihood(len(x)))
    return model, spec, s, spec.adaptations(model, s)


def burn_in_steps(args, steps_per_epoch):
    """Iterations before averaging starts: ``--burn-in-epochs`` epochs, else the fraction
    ``--burn-in`` of the run."""
    if args.burn_in_epochs is not None:
        return args.burn_in_epochs * steps_per_epoch
    return int(args.burn_in * args.epochs * steps_per_epoch)


def run_sampler(method, data, args, device, run_dir):
    x, y, x_test, y_test = data
    model, spec, s, adaptations = sampler_model(method, x, args, device)
    tau = args.tau if args.tau is not None else TAU.get(args.dataset, TAU["mnist"])
    sampler = spec.sampler(model, s, args.lr, inverse_temperature=tau, adaptations=adaptations)
    average = StepSizeWeightedAverage()
    sink = DiskSamples(run_dir / "samples", shard_size=10)

    def on_sample(s, k, weight):
        values = s.values()
        average.update(chunked_probs(lambda inputs: model_output(model, values, inputs).softmax(-1), x_test), weight)

    steps_per_epoch = math.ceil(len(x) / args.batch_size)
    burn_in = burn_in_steps(args, steps_per_epoch)
    history = sampler.run((x, y), epochs=args.epochs, batch_size=args.batch_size, burn_in=burn_in,
                          thin=args.thin, sink=sink, on_sample=on_sample, stateful=[average], seed=args.seed, device=device,
                          checkpoint=run_dir / "checkpoint.pt", progress=not args.no_progress)
    atomic.write_csv(history, run_dir / "history.csv")
    if average.count == 0:
        if args.burn_in_epochs is not None:
            return None, None  # the first legs of a longer run: the chain is checkpointed, nothing averaged yet
        raise RuntimeError("no sample was averaged: lower --thin or --burn-in, or run more epochs")
    samples = sink.load()
    draws = [{n: v[i].to(device) for n, v in samples.items()} for i in range(len(sink))]
    weights = [sampler.lr(burn_in + args.thin * (i + 1)) for i in range(len(draws))]  # as in the online average
    # over every leg of a run that was resumed or extended
    return {**scores(average.value, y_test), "samples": average.count, "train_seconds": float(history.seconds.sum())}, Predictor(model, draws, weights)


class Predictor:
    """A run's predictive: its networks (averaged samples, or a point estimate) and their weights."""

    def __init__(self, model, draws, weights):
        self.model, self.draws, self.weights = model, draws, weights

    def probs(self, inputs, pool="linear"):
        """The ensemble's class probabilities (``pool``: see :func:`ensemble_probs`)."""
        return ensemble_probs([self.model.net_output(values, inputs).log_softmax(-1) for values in self.draws], self.weights, pool)

    def first(self, inputs):
        """The class probabilities of the first network alone."""
        return self.model.net_output(self.draws[0], inputs).softmax(-1)


def fgsm_curve(predictor, x, y, protocol):
    """Accuracy under FGSM by one of :data:`FGSM_PROTOCOLS` (see the module docstring)."""
    if protocol == "posterior":
        return fgsm_accuracy(predictor.probs, x, y, EPSILONS, batch_size=500)
    return fgsm_accuracy(lambda inputs: predictor.probs(inputs, pool="log"), x, y, EPSILONS, batch_size=500,
                         attack_probs_fn=predictor.first, target="prediction")
