"""Likelihoods: the data plate's N/n scaling, shape checks, prediction aggregation."""

import math

import numpy as np
import pyro.distributions as dist
import pyro.poutine as poutine
import pytest
import torch
from scipy import stats
from scipy.special import logsumexp

from pyrozoo.models import CategoricalLikelihood, GaussianLikelihood, Likelihood
from tests.stats import gaussian_variance_rel_tolerance, mean_tolerance

N, n = 50, 8


def _gaussian_fixed(**kw):
    return GaussianLikelihood(dataset_size=N, precision=4.0, **kw)


def _gaussian_gamma(**kw):
    return GaussianLikelihood(dataset_size=N, precision=dist.Gamma(6.0, 6.0), **kw)


def _categorical(**kw):
    return CategoricalLikelihood(dataset_size=N, **kw)


def _data(kind, batch, device, dtype, g=None):
    g = g or torch.Generator().manual_seed(0)
    if kind == "categorical":
        f = torch.randn(batch, 3, generator=g, dtype=dtype).to(device)
        y = torch.randint(0, 3, (batch,), generator=g).to(device)
    else:
        f = torch.randn(batch, 1, generator=g, dtype=dtype).to(device)
        y = torch.randn(batch, 1, generator=g, dtype=dtype).to(device)
    return f, y


# (id, factory, data kind)
LIKELIHOOD_CASES = [
    ("gaussian-fixed", _gaussian_fixed, "regression"),
    ("gaussian-gamma", _gaussian_gamma, "regression"),
    ("categorical", _categorical, "categorical"),
]


@pytest.fixture(params=LIKELIHOOD_CASES, ids=[c[0] for c in LIKELIHOOD_CASES])
def lik_case(request):
    return request.param


def _trace(lik, f, y=None, subsample=None):
    return poutine.trace(lambda: lik(f, y, subsample)).get_trace()


# -- the data plate -------------------------------------------------------------------------


@pytest.mark.parametrize("with_indices", [False, True], ids=["count-only", "indices"])
def test_minibatch_scale_is_N_over_n(lik_case, device, dtype, with_indices):
    _, factory, kind = lik_case
    lik = factory()
    f, y = _data(kind, n, device, dtype)
    idx = torch.randperm(N)[:n].to(device) if with_indices else None
    trace = _trace(lik, f, y, idx)
    obs = trace.nodes["obs"]
    assert obs["is_observed"] and torch.equal(obs["value"], y)
    assert obs["scale"] == pytest.approx(N / n)
    (frame,) = [fr for fr in obs["cond_indep_stack"] if fr.name == "data"]
    assert frame.size == n and frame.full_size == N
    if with_indices:
        assert torch.equal(trace.nodes["data"]["value"], idx)
    # global latents (the noise precision) are outside the plate: not scaled
    for name, site in trace.nodes.items():
        if site["type"] == "sample" and not site["is_observed"]:
            assert site["scale"] == 1.0 and not site["cond_indep_stack"]
    trace.compute_log_prob()
    unscaled = obs["fn"].log_prob(y).sum()
    torch.testing.assert_close(trace.log_prob_sum(lambda name, site: name == "obs"), unscaled * (N / n))


def test_full_batch_and_no_dataset_size_are_unscaled(lik_case):
    _, factory, kind = lik_case
    f, y = _data(kind, N, "cpu", torch.float64)
    assert _trace(factory(), f, y).nodes["obs"]["scale"] == 1.0
    lik = factory()
    lik.dataset_size = None
    assert _trace(lik, f[:n], y[:n]).nodes["obs"]["scale"] == 1.0


def test_minibatch_log_likelihood_is_unbiased():
    """Averaged over all equally likely minibatches, (N/n) sum_batch log p equals the full
    data log-likelihood: with a partition into batches, the mean over the batches is exact."""
    lik = _gaussian_fixed()
    f, y = _data("regression", N, "cpu", torch.float64)
    full = lik.scaled_log_likelihood(f, y, {})
    lik_full = GaussianLikelihood(dataset_size=None, precision=4.0)
    torch.testing.assert_close(full, lik_full.scaled_log_likelihood(f, y, {}))
    perm = torch.randperm(N)
    batches = [perm[i : i + 10] for i in range(0, N, 10)]
    estimates = torch.stack([lik.scaled_log_likelihood(f[b], y[b], {}) for b in batches])
    torch.testing.assert_close(estimates.mean(), full)


def test_scaled_log_likelihood_equals_trace(lik_case, device, dtype):
    _, factory, kind = lik_case
    lik = factory()
    f, y = _data(kind, n, device, dtype)
    trace = _trace(lik, f, y)
    trace.compute_log_prob()
    latents = {k: trace.nodes[name]["value"] for k, (name, _) in lik.latent_sites(f).items()}
    expected = trace.log_prob_sum(lambda name, site: name == "obs")
    torch.testing.assert_close(lik.scaled_log_likelihood(f, y, latents), expected)


def test_gaussian_log_likelihood_against_scipy():
    lik = GaussianLikelihood(dataset_size=N, precision=2.5)
    f, y = _data("regression", n, "cpu", torch.float64)
    expected = stats.norm.logpdf(y.numpy(), f.numpy(), 2.5**-0.5).sum() * N / n
    assert lik.scaled_log_likelihood(f, y, {}).item() == pytest.approx(expected, rel=1e-12)
    # a 1-D target against a (n, 1) output is the same thing
    assert lik.scaled_log_likelihood(f, y.squeeze(-1), {}).item() == pytest.approx(expected, rel=1e-12)


def test_categorical_log_likelihood_against_numpy():
    lik = CategoricalLikelihood(dataset_size=N)
    f, y = _data("categorical", n, "cpu", torch.float64)
    logits = f.numpy()
    log_probs = logits - logsumexp(logits, axis=-1, keepdims=True)
    expected = log_probs[np.arange(n), y.numpy()].sum() * N / n
    assert lik.scaled_log_likelihood(f, y, {}).item() == pytest.approx(expected, rel=1e-12)


def test_precision_prior_site(device):
    lik = _gaussian_gamma()
    f, y = _data("regression", n, device, torch.float64)
    trace = _trace(lik, f, y)
    site = trace.nodes[GaussianLikelihood.PRECISION_SITE]
    assert not site["is_observed"] and site["value"].shape == ()
    assert site["value"].device.type == device.type and site["value"].dtype == torch.float64
    assert isinstance(site["fn"], dist.Gamma)
    # the observation's noise scale is the sampled precision's
    torch.testing.assert_close(trace.nodes["obs"]["fn"].base_dist.scale, site["value"].rsqrt().expand(n, 1))


# -- predicting --------------------------------------------------------------------------------


def test_predicting_more_points_than_the_dataset(lik_case):
    _, factory, kind = lik_case
    lik = factory()
    f, _ = _data(kind, 3 * N, "cpu", torch.float64)
    trace = _trace(lik, f)
    obs = trace.nodes["obs"]
    assert not obs["is_observed"] and obs["scale"] == 1.0
    assert obs["value"].shape[0] == 3 * N
    # observing that many is an error: N/n scaling would be meaningless
    _, y = _data(kind, 3 * N, "cpu", torch.float64)
    with pytest.raises(ValueError, match="dataset_size"):
        lik(f, y)
    with pytest.raises(ValueError, match="dataset_size"):
        lik.scaled_log_likelihood(f, y, {"precision": torch.tensor(1.0)} if lik.latent_sites(f) else {})


def _reference_log_predictive(kind, f, y, precision):
    """log (1/S) sum_s p(y | f_s) per example, with scipy."""
    f, y = f.double().numpy(), (y if kind == "categorical" else y.double()).numpy()
    if kind == "categorical":
        logp = f - logsumexp(f, axis=-1, keepdims=True)
        lp = np.take_along_axis(logp, np.broadcast_to(y[None, :, None], f.shape[:2] + (1,)), -1)[..., 0]
    else:
        scale = np.asarray(precision) ** -0.5
        scale = scale.reshape((-1,) + (1,) * (f.ndim - 1)) if np.ndim(scale) else scale
        lp = stats.norm.logpdf(y[None], f, scale).reshape(f.shape[0], f.shape[1], -1).sum(-1)
    return logsumexp(lp, axis=0) - math.log(f.shape[0])


def test_log_predictive_against_direct_computation(lik_case, dtype):
    _, factory, kind = lik_case
    lik = factory()
    S = 7
    g = torch.Generator().manual_seed(1)
    f = torch.stack([_data(kind, n, "cpu", dtype, g)[0] for _ in range(S)])
    _, y = _data(kind, n, "cpu", dtype, g)
    latents = {}
    precision = getattr(lik, "precision", None)
    if lik.latent_sites(f[0]):
        latents = {"precision": torch.rand(S, generator=g, dtype=dtype) + 0.5}
        precision = latents["precision"].numpy()
    lp = lik.log_predictive(f, y, latents)
    assert lp.shape == (n,) and lp.dtype == dtype
    expected = _reference_log_predictive(kind, f, y, precision)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-10}
    torch.testing.assert_close(lp.double(), torch.as_tensor(expected), **tol)
    # the specialised rule agrees with the generic per-sample loop of the base class
    torch.testing.assert_close(Likelihood.log_predictive(lik, f, y, latents), lp)


def test_gaussian_log_predictive_multi_output():
    lik = GaussianLikelihood(precision=3.0)
    g = torch.Generator().manual_seed(2)
    f = torch.randn(5, n, 2, generator=g, dtype=torch.float64)
    y = torch.randn(n, 2, generator=g, dtype=torch.float64)
    expected = _reference_log_predictive("regression", f, y, 3.0)
    torch.testing.assert_close(lik.log_predictive(f, y), torch.as_tensor(expected))


def test_gaussian_aggregate_moments():
    """Mean over samples; variance = epistemic (spread of the means) + mean aleatoric noise;
    predictive samples are the network outputs plus noise of each sample's precision."""
    lik = _gaussian_gamma()
    g = torch.Generator().manual_seed(3)
    S = 4000
    f = 2.0 + torch.randn(S, 4, 1, generator=g, dtype=torch.float64)
    precision = torch.rand(S, generator=g, dtype=torch.float64) + 0.5
    pred = lik.aggregate(f, {"precision": precision})
    torch.testing.assert_close(pred.mean, f.mean(0))
    total_var = f.var(0, unbiased=False) + (1 / precision).mean()
    torch.testing.assert_close(pred.std**2, total_var)
    assert pred.samples.shape == f.shape
    # standardised noise is N(0, 1)
    z = ((pred.samples - f) * precision.sqrt().reshape(S, 1, 1)).reshape(-1)
    assert abs(float(z.mean())) < mean_tolerance(1.0, z.numel())
    assert abs(float(z.var()) - 1) < gaussian_variance_rel_tolerance(z.numel())
    # given the draws, E[(sample_s - mean)^2] averaged over s is exactly the aggregated variance
    sq = (pred.samples - pred.mean) ** 2
    assert (sq.mean(0) - total_var).abs().le(mean_tolerance(sq.var(0), S, sq[0].numel())).all()


def test_gaussian_aggregate_fixed_precision_single_sample():
    lik = GaussianLikelihood(precision=4.0)
    f = torch.randn(1, 6, 1)
    pred = lik.aggregate(f)
    torch.testing.assert_close(pred.mean, f[0])
    torch.testing.assert_close(pred.std, torch.full_like(f[0], 0.5))


def test_categorical_aggregate():
    lik = CategoricalLikelihood()
    g = torch.Generator().manual_seed(4)
    f = torch.randn(6, n, 3, generator=g, dtype=torch.float64)
    pred = lik.aggregate(f)
    probs = torch.softmax(f, -1)
    torch.testing.assert_close(pred.mean, probs.mean(0))
    torch.testing.assert_close(pred.mean.sum(-1), torch.ones(n, dtype=torch.float64))
    torch.testing.assert_close(pred.std, torch.as_tensor(probs.numpy().std(0)))
    torch.testing.assert_close(pred.samples, probs)


# -- errors -------------------------------------------------------------------------------------


BAD_TARGETS = [
    ("gauss-width", GaussianLikelihood(precision=1.0), (n, 1), torch.zeros(n, 2), ValueError, r"\(8, 2\).*\(8, 1\)"),
    ("gauss-1d-target-for-2-outputs", GaussianLikelihood(precision=1.0), (n, 2), torch.zeros(n), ValueError, "do not match"),
    ("gauss-length", GaussianLikelihood(precision=1.0), (n, 1), torch.zeros(n + 1, 1), ValueError, "do not match"),
    ("cat-label-shape", CategoricalLikelihood(), (n, 3), torch.zeros(n, 1, dtype=torch.long), ValueError, r"expected labels of shape \(8,\)"),
    ("cat-1d-logits", CategoricalLikelihood(), (n,), torch.zeros(n, dtype=torch.long), ValueError, r"\(n, classes\)"),
    ("cat-float-labels", CategoricalLikelihood(), (n, 3), torch.zeros(n), TypeError, "integer"),
    ("cat-bool-labels", CategoricalLikelihood(), (n, 3), torch.zeros(n, dtype=torch.bool), TypeError, "integer"),
]


@pytest.mark.parametrize("lik,f_shape,y,error,match", [c[1:] for c in BAD_TARGETS], ids=[c[0] for c in BAD_TARGETS])
def test_bad_targets_raise_clear_errors_in_the_model(lik, f_shape, y, error, match):
    with pytest.raises(error, match=match):
        lik(torch.zeros(f_shape), y)


@pytest.mark.parametrize(
    "lik,f_shape,y,error,match",
    [c[1:] for c in BAD_TARGETS],
    ids=[c[0] for c in BAD_TARGETS],
)
def test_bad_targets_raise_clear_errors_in_direct_evaluation(lik, f_shape, y, error, match):
    """The same checks on the path objectives use without the effect stack."""
    with pytest.raises(error, match=match):
        lik.scaled_log_likelihood(torch.zeros(f_shape), y, {})


def test_scalar_predictions_raise():
    with pytest.raises(ValueError, match="leading batch dimension"):
        GaussianLikelihood()(torch.tensor(1.0), torch.tensor(1.0))


def test_subsample_of_wrong_length_raises():
    f, y = _data("regression", n, "cpu", torch.float32)
    for lik in (GaussianLikelihood(dataset_size=N), GaussianLikelihood()):
        with pytest.raises(ValueError, match="subsample"):
            lik(f, y, torch.arange(n + 1))


@pytest.mark.parametrize("size", [0, -3, 2.5, "10"])
def test_bad_dataset_size_raises(size):
    with pytest.raises(ValueError, match="dataset_size"):
        GaussianLikelihood(dataset_size=size)


@pytest.mark.parametrize(
    "precision",
    [0.0, -1.0, float("nan"), float("inf"), dist.Normal(1.0, 1.0), dist.Gamma(torch.ones(2), 1.0)],
    ids=["zero", "negative", "nan", "inf", "real-support-prior", "batched-prior"],
)
def test_bad_precision_raises(precision):
    with pytest.raises(ValueError, match="precision"):
        GaussianLikelihood(precision=precision)



@pytest.mark.parametrize(
    "prior",
    [
        dist.Gamma(2.0, 1.0),
        dist.InverseGamma(3.0, 2.0),
        dist.LogNormal(0.0, 1.0),
        dist.HalfCauchy(1.0),
    ],
    ids=["gamma", "inverse-gamma", "lognormal", "half-cauchy"],
)
def test_positive_precision_priors_work(prior, dtype):
    lik = GaussianLikelihood(dataset_size=N, precision=prior)
    f, y = _data("regression", n, "cpu", dtype)
    trace = _trace(lik, f, y)
    site = trace.nodes[GaussianLikelihood.PRECISION_SITE]
    assert site["value"].dtype == dtype and site["value"] > 0
    torch.testing.assert_close(site["fn"].mean.double(), prior.mean.double())


# (id, labels for logits of 3 classes, error, regex the message must match)
BAD_LABELS = [
    ("label-K", torch.tensor([0, 1, 3, 2, 0, 1, 2, 0]), ValueError, r"label\(s\) \[3\] outside the likelihood's range.*integers 0\.\.2"),
    ("negative", torch.tensor([0, -1, 2, 2, 0, 1, 2, 0]), ValueError, r"label\(s\) \[-1\] outside"),
    ("several", torch.tensor([5, 1, 3, 2, 0, 5, 2, 0]), ValueError, r"label\(s\) \[3, 5\] outside"),
    ("non-integer", torch.tensor([0.0, 1.5, 2.0, 2.0, 0.0, 1.0, 2.0, 0.25]), ValueError, r"non-integer value\(s\) \[0.25, 1.5\]"),
    ("whole-floats", torch.zeros(n), TypeError, r"integer tensor.*\.long\(\)"),
    ("bool", torch.zeros(n, dtype=torch.bool), TypeError, "integer tensor"),
]


@pytest.mark.parametrize("labels,error,match", [c[1:] for c in BAD_LABELS], ids=[c[0] for c in BAD_LABELS])
def test_categorical_label_range(labels, error, match):
    with pytest.raises(error, match=match):
        CategoricalLikelihood().check_labels(labels, 3)


@pytest.mark.parametrize("labels", [torch.tensor([0, 1, 3, 2, 0, 1, 2, 0]), torch.tensor([0, -1, 2, 2, 0, 1, 2, 0])], ids=["K", "negative"])
def test_log_predictive_refuses_labels_out_of_range(labels):
    """A ValueError naming the labels, not an index error from the gather (a device-side
    assert on CUDA)."""
    with pytest.raises(ValueError, match="outside the likelihood's range"):
        CategoricalLikelihood().log_predictive(torch.randn(4, n, 3), labels)


def test_labels_in_range_pass():
    CategoricalLikelihood().check_labels(torch.tensor([0, 1, 2, 2, 0, 1, 2, 0]), 3)
    CategoricalLikelihood().check_labels(torch.zeros(0, dtype=torch.long), 3)
