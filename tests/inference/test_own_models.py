"""A user's own Pyro model through fit, predict and evaluate (issue 42): the calling convention
is read off the model (a full data plate is minibatched and scaled, a plate with
``subsample_size`` subsamples itself, ``subsample=`` gets the minibatch), prediction finds the
observed sites and scores them by their own density. Answers are exact where they can be: the
conjugate posterior predictive, hand-written log-densities, a self-subsampling model against
its full-plate twin under the same draws."""

import math

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine

from pyrozoo.guides import DeltaGuide, MeanFieldNormalGuide
from pyrozoo.inference import evaluate, fit, posterior_samples, predict
from pyrozoo.inference.calling import CONTRACT, batches_of, check_data_matches_model, model_call_of
from pyrozoo.poutine import plate_scale, subsample_indices
from tests.inference.cases import linear_regression_model
from tests.inference.own_models import CASES, PROBLEM, SPARSE_NOISE_SCALE, SPARSE_PRIOR_SCALE, SUBSAMPLE, bayesian_lasso_draws, case


def _prior_draws(model, x, num):
    """``num`` joint prior draws of the model's latent sites, stacked."""
    draws = [poutine.trace(model).get_trace(x) for _ in range(num)]
    names = [k for k, s in draws[0].nodes.items() if s["type"] == "sample" and not s["is_observed"] and k not in ("data", "y")]
    return {k: torch.stack([t.nodes[k]["value"] for t in draws]) for k in names}


# -- the calling convention ----------------------------------------------------------------------

@pytest.mark.parametrize("name", CASES)
def test_the_convention_is_read_off_the_model(name):
    c = case(name)
    assert model_call_of(c.full, c.x, c.y, 16).kind == "minibatch"
    assert model_call_of(c.full, c.x, c.y, None).kind == "full-batch"
    sub = model_call_of(c.twin, c.x, c.y, 16)
    assert (sub.kind, sub.batch_size) == ("self-subsampling", SUBSAMPLE)
    bnn = linear_regression_model(PROBLEM, dtype=torch.float32)
    assert model_call_of(bnn, c.x, c.y, 16).kind == "subsample"


def test_a_model_that_cannot_be_called_with_x_and_y_names_the_contract():
    def model(x):
        pyro.sample("w", dist.Normal(0.0, 1.0))

    with pytest.raises(TypeError, match="cannot be called as model\\(x, y\\)") as info:
        fit(model, MeanFieldNormalGuide(model), (PROBLEM.x, PROBLEM.y), epochs=1, progress=False)
    assert CONTRACT in str(info.value)


def test_minibatching_per_example_latents_or_a_model_without_a_data_plate_is_refused_with_the_fix():
    def local(x, y=None):
        with pyro.plate("data", len(x)):
            z = pyro.sample("z", dist.Normal(0.0, 1.0))
            pyro.sample("y", dist.Normal(z, 1.0), obs=y)

    with pytest.raises(ValueError, match="per example.*subsample_size=16.*batch_size=None"):
        model_call_of(local, PROBLEM.x, PROBLEM.y, 16)

    def no_plate(x, y=None):
        w = pyro.sample("w", dist.Normal(torch.zeros(3), 1.0).to_event(1))
        pyro.sample("y", dist.Normal(x @ w, 1.0).to_event(1), obs=y)

    with pytest.raises(ValueError, match="no plate over the 120 examples.*batch_size=None"):
        model_call_of(no_plate, PROBLEM.x, PROBLEM.y, 16)
    assert model_call_of(no_plate, PROBLEM.x, PROBLEM.y, None).kind == "full-batch"


def test_plate_scale_weights_the_data_plate_only_by_n_over_b():
    c = case("heteroscedastic")
    xb, yb = c.x[:20], c.y[:20]
    plain = poutine.trace(c.full).get_trace(xb, yb)
    with plate_scale("data", len(c.x) / 20):
        scaled = poutine.trace(poutine.replay(c.full, trace=plain)).get_trace(xb, yb)
    plain.compute_log_prob(), scaled.compute_log_prob()
    assert torch.allclose(scaled.nodes["y"]["log_prob_sum"], plain.nodes["y"]["log_prob_sum"] * len(c.x) / 20)
    assert torch.equal(scaled.nodes["w"]["log_prob_sum"], plain.nodes["w"]["log_prob_sum"])


def test_subsample_indices_chooses_the_members_and_keeps_the_plate_scale():
    idx = torch.arange(40, 40 + SUBSAMPLE)
    c = case("linear")
    with subsample_indices({"data": idx}):
        trace = poutine.trace(c.twin).get_trace(c.x, c.y)
    assert torch.equal(trace.nodes["y"]["value"], c.y[idx])
    assert trace.nodes["y"]["scale"] == pytest.approx(len(c.x) / SUBSAMPLE)


# -- prediction ----------------------------------------------------------------------------------

def _hand_log_density(name, draws, x, y):
    """``(S, n)`` log p(y_i | draw s) written out for the function models."""
    w = draws["w"]
    f = w @ x.T
    if name == "linear":
        return dist.Normal(f, PROBLEM.noise_scale).log_prob(y)
    if name == "poisson_glm":
        return y * f - f.exp() - torch.lgamma(y + 1)
    if name == "logistic":
        return -torch.nn.functional.binary_cross_entropy_with_logits(f, y.expand_as(f), reduction="none")
    return dist.Normal(f, (draws["v"] @ x.T).exp()).log_prob(y)


@pytest.mark.parametrize("name", [n for n in CASES if n != "mlp_pyromodule"])
def test_test_ll_is_the_log_mean_exp_of_each_sites_own_density(name):
    c = case(name)
    pyro.set_rng_seed(1)
    draws = _prior_draws(c.full, c.x, 7)
    got = evaluate(c.full, None, c.x, c.y, num_samples=7, samples=draws)
    lp = _hand_log_density(name, draws, c.x, c.y)
    assert got["test_ll"] == pytest.approx(float((torch.logsumexp(lp, 0) - math.log(7)).mean()), rel=1e-5)
    if name == "logistic":
        probs = torch.sigmoid(draws["w"] @ c.x.T).mean(0)
        assert got["accuracy"] == pytest.approx(float(((probs > 0.5).float() == c.y).float().mean()))
        assert set(got) == {"test_ll", "accuracy", "error", "ece"}
    else:
        assert set(got) == {"test_ll", "rmse"}


@pytest.mark.parametrize("name", CASES)
def test_a_self_subsampling_model_predicts_every_example_once_as_its_full_plate_twin(name):
    c = case(name)
    pyro.set_rng_seed(2)
    draws = _prior_draws(c.full, c.x, 5)
    full = evaluate(c.full, None, c.x, c.y, num_samples=5, samples=draws)
    sub = evaluate(c.twin, None, c.x, c.y, num_samples=5, samples=draws)
    assert sub == pytest.approx(full, rel=1e-6)
    a, b = predict(c.full, None, c.x, num_samples=5, samples=draws), predict(c.twin, None, c.x, num_samples=5, samples=draws)
    assert torch.allclose(a.mean, b.mean, atol=1e-6) and torch.allclose(a.std, b.std, atol=1e-6)
    assert posterior_samples(c.twin, None, c.x, num_samples=5, samples=draws)["y"].shape == (5, len(c.x))


def test_the_conjugate_posterior_predictive_is_recovered_from_exact_draws():
    """y* ~ N(x* mu, x* Sigma x*^T + sigma^2): predict's mean and total sd and evaluate's
    test_ll from 4000 exact posterior draws, within Monte Carlo error of that many draws."""
    c = case("linear")
    mean, cov = PROBLEM.posterior()
    num = 4000
    torch.manual_seed(0)
    w = torch.distributions.MultivariateNormal(mean, cov).sample((num,))
    x, y = c.x[:40], c.y[:40]
    pred = predict(c.full, None, x, num_samples=num, samples={"w": w})
    exact_mean, exact_var = x @ mean, (x @ cov * x).sum(-1) + PROBLEM.noise_scale**2
    f_sd = (x @ cov * x).sum(-1).sqrt()
    assert ((pred.mean - exact_mean).abs() <= 4 * f_sd / math.sqrt(num)).all()
    assert torch.allclose(pred.std, exact_var.sqrt(), rtol=0.02)
    got = evaluate(c.full, None, x, y, num_samples=num, samples={"w": w})["test_ll"]
    exact = float(dist.Normal(exact_mean, exact_var.sqrt()).log_prob(y).mean())
    p = _hand_log_density("linear", {"w": w}, x, y).exp()
    tolerance = 4 * float((p.std(0) / p.mean(0)).max()) / math.sqrt(num)
    assert abs(got - exact) <= tolerance


def test_the_bayesian_lasso_gibbs_draws_match_the_posterior_by_quadrature():
    """The sparse regression's exact reference: on one weak predictor, where the Laplace
    prior's kink at zero shapes the posterior, the Gibbs draws' mean and second moment equal
    the posterior's by quadrature within four Monte Carlo errors (batch means over 20 batches,
    so the chain's autocorrelation is counted), and the posterior is not the Gaussian a
    normal prior of the same variance would give (so the test can tell them apart)."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(30, 1, generator=g, dtype=torch.float64)
    y = 0.1 * x[:, 0] + SPARSE_NOISE_SCALE * torch.randn(30, generator=g, dtype=torch.float64)
    grid = torch.linspace(-1.0, 1.0, 40001, dtype=torch.float64)
    log_post = -grid.abs() / SPARSE_PRIOR_SCALE - ((y[:, None] - x * grid).square().sum(0)) / (2 * SPARSE_NOISE_SCALE**2)
    weights = (log_post - log_post.max()).exp()
    weights = weights / weights.sum()
    moments = [float((weights * grid**k).sum()) for k in (1, 2)]
    draws = bayesian_lasso_draws(x, y, num_samples=20000, warmup=200, seed=1)[:, 0]
    errors = []
    for k, exact in zip((1, 2), moments):
        batches = (draws**k).reshape(20, -1).mean(1)
        errors.append(float(batches.std()) / math.sqrt(20))
        assert abs(float(batches.mean()) - exact) <= 4 * errors[-1], (k, float(batches.mean()), exact)
    # a Gaussian prior with the Laplace's variance 2 b^2: the conjugate posterior's mean
    precision = float(x[:, 0] @ x[:, 0]) / SPARSE_NOISE_SCALE**2 + 1 / (2 * SPARSE_PRIOR_SCALE**2)
    gaussian_mean = float(x[:, 0] @ y) / SPARSE_NOISE_SCALE**2 / precision
    assert abs(gaussian_mean - moments[0]) > 10 * errors[0]


def test_fewer_inputs_than_the_models_own_subsample_is_refused_naming_the_fix():
    c = case("linear")
    with pytest.raises(ValueError, match="larger subsample than the 5 inputs.*subsample_size=min\\(B, len\\(x\\)\\)"):
        evaluate(c.twin, None, c.x[:5], c.y[:5], num_samples=2, samples={"w": torch.zeros(2, 3)})


def test_predict_needs_a_fitted_guide_and_names_the_fix():
    c = case("linear")
    with pytest.raises(ValueError, match="has not been fitted.*fit\\(model, guide"):
        predict(c.full, MeanFieldNormalGuide(c.full), c.x, num_samples=2)


# -- fit under every convention ------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["minibatch", "self-subsampling", "full-batch"])
def test_fit_recovers_the_conjugate_posterior_mean_under_every_convention(kind):
    """A mean-field guide on the orthogonal design represents the exact posterior: its median
    is the posterior mean, within one posterior sd after training (the prior's mean is 50 sd
    away), whichever way the model meets its data."""
    pyro.clear_param_store()
    c = case("linear")
    model = c.twin if kind == "self-subsampling" else c.full
    guide = MeanFieldNormalGuide(model)
    full = kind == "full-batch"  # the same 600 steps: one per epoch, or four minibatches of 30
    epochs = 600 if full else 150
    # Adam's steps jitter the locations by about the learning rate: decayed to 1e-3 at the end
    history = fit(model, guide, (c.x, c.y), epochs=epochs, batch_size=None if full else 30, lr=0.05, lr_schedule=lambda e: 0.02 ** (e / epochs), seed=0, progress=False)
    assert history.attrs["status"] == "ok"
    mean, cov = PROBLEM.posterior()
    assert ((guide.median()["w"] - mean).abs() <= cov.diagonal().sqrt()).all(), (guide.median()["w"], mean)
    scores = evaluate(model, guide, c.x, c.y, num_samples=50)
    assert math.isfinite(scores["test_ll"]) and scores["rmse"] < 1.0


@pytest.mark.parametrize("name", CASES)
def test_fit_predict_and_evaluate_run_on_every_own_model(name):
    pyro.clear_param_store()
    c = case(name)
    guide = DeltaGuide(c.twin)
    fit(c.twin, guide, (c.x, c.y), epochs=3, lr=0.01, seed=0, progress=False)
    pred = predict(c.twin, guide, c.x, num_samples=3)
    assert pred.mean.shape[0] == len(c.x) and torch.isfinite(pred.mean).all()
    assert all(math.isfinite(v) for v in evaluate(c.twin, guide, c.x, c.y, num_samples=3).values())


def test_data_of_another_dtype_than_a_parameterless_pyromodule_is_refused_naming_the_conversion():
    """All the module's weights are PyroSample (no parameter says its dtype): the failure in
    its first layer is named as the dtype mismatch it is."""
    c = case("mlp_pyromodule")
    with pytest.raises(TypeError, match="inputs of dtype float64, while its priors built from Python numbers are float32.*x.to\\(torch.float32\\)"):
        fit(c.twin, MeanFieldNormalGuide(c.twin), (c.x.double(), c.y.double()), epochs=1, progress=False)


def test_data_of_another_dtype_than_the_model_is_refused_naming_the_conversion():
    c = case("mlp_pyromodule")
    c.full.fc1.bias = torch.nn.Parameter(torch.zeros(8))  # a point-estimate parameter gives the module a dtype
    with pytest.raises(TypeError, match="inputs are float64 but the model's parameters are float32.*x.to\\(torch.float32\\)"):
        fit(c.full, DeltaGuide(c.full), (c.x.double(), c.y.double()), epochs=1, progress=False)


def test_data_on_another_device_than_the_model_is_refused_naming_the_move():
    """Inputs on a device none of the module's parameters is on (here ``meta``, which a
    CPU-only machine has) are named as such before the model runs, on every path that takes
    data it does not move itself."""
    c = case("mlp_pyromodule")
    c.full.fc1.bias = torch.nn.Parameter(torch.zeros(8))  # a parameter gives the module a device
    message = r"the inputs are on meta but the model's parameters are on cpu: move the data \(x.to\('cpu'\)\)"
    with pytest.raises(ValueError, match="prediction: " + message):
        check_data_matches_model(c.full, c.x.to("meta"), "prediction")
    with pytest.raises(ValueError, match="SGLD: " + message):
        batches_of(c.full, (c.x.to("meta"), c.y.to("meta")), 16, caller="SGLD")
    check_data_matches_model(c.full, c.x, "prediction")  # same device, same dtype: quiet


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a second device: CUDA")
@pytest.mark.parametrize("model_device, data_device", [("cuda", "cpu"), ("cpu", "cuda")])
def test_fit_and_the_samplers_move_the_data_before_the_first_call(model_device, data_device):
    """fit trains where the model lives (or where ``device=`` says) and the samplers where
    ``device=`` says: the data are moved there before the model's convention is probed, so
    data on another device than the model train instead of failing inside a layer."""
    from pyrozoo.inference import SGLD

    c = case("mlp_pyromodule")
    model = c.full.to(model_device)
    data = (c.x.to(data_device), c.y.to(data_device))
    guide = MeanFieldNormalGuide(model)
    fit(model, guide, data, epochs=1, lr=0.01, seed=0, progress=False)
    assert next(model.parameters()).device.type == model_device
    sampler = SGLD(case("mlp_pyromodule").full.to(model_device), lr=1e-4)
    history = sampler.run(data, num_steps=3, batch_size=16, seed=0, progress=False, device=model_device)
    assert len(history) and all(t.device.type == model_device for t in sampler.values().values())


# -- the samplers under every convention -----------------------------------------------------------

@pytest.mark.parametrize("sampler", ["SGLD", "SGHMC"])
@pytest.mark.parametrize("kind", ["minibatch", "self-subsampling", "full-batch"])
def test_the_samplers_draw_the_conjugate_posterior_under_every_convention(sampler, kind):
    """SGLD and SGHMC on a model written as Pyro documents it (no ``idx`` argument): the chain's
    mean is the exact posterior mean within five Monte Carlo sds (from the chain's effective
    sample size), and its sd is the exact sd within five sds of a sample sd, plus 5% for the
    discretisation at this step size."""
    from pyro.ops.stats import effective_sample_size

    from pyrozoo.inference import SGHMC, SGLD, InMemorySamples

    c = case("linear")
    model = c.twin if kind == "self-subsampling" else c.full
    sink = InMemorySamples()
    chain = SGLD(model, lr=1e-4) if sampler == "SGLD" else SGHMC(model, lr=1e-5, momentum=0.9)
    chain.run((c.x, c.y), num_steps=4000, burn_in=1000, batch_size=None if kind == "full-batch" else 30, sink=sink, progress=False, seed=0)
    w = sink.load()["w"]
    mean, cov = PROBLEM.posterior()
    sd = cov.diagonal().sqrt()
    ess = effective_sample_size(w.unsqueeze(0).double(), chain_dim=0, sample_dim=1).float()
    assert ((w.mean(0) - mean).abs() <= 5 * sd / ess.sqrt()).all(), ((w.mean(0) - mean) / sd, ess)
    assert ((w.std(0) / sd - 1).abs() <= 5 / (2 * ess).sqrt() + 0.05).all(), (w.std(0) / sd, ess)


def test_evaluate_reads_every_row_of_samples_whatever_num_samples_says():
    """As Predictive(posterior_samples=...) and the BNN path read them: 10 rows are 10 draws,
    at the default num_samples (100) as at any other."""
    c = case("linear")
    pyro.set_rng_seed(4)
    draws = _prior_draws(c.full, c.x, 10)
    every = evaluate(c.full, None, c.x, c.y, samples=draws)
    lp = _hand_log_density("linear", draws, c.x, c.y)
    assert every["test_ll"] == pytest.approx(float((torch.logsumexp(lp, 0) - math.log(10)).mean()), rel=1e-5)
    assert evaluate(c.full, None, c.x, c.y, num_samples=3, samples=draws) == pytest.approx(every)
    h = case("heteroscedastic")
    both = _prior_draws(h.full, h.x, 10)
    with pytest.raises(ValueError, match="different numbers of draws per site"):
        evaluate(h.full, None, h.x, h.y, samples={"w": both["w"], "v": both["v"][:4]})
