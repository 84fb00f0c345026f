"""predict / evaluate: shapes, chunking, original-unit metrics, classification metrics, and the
clear errors on bad input (NaN/inf, an empty test set, a bad target scale, labels out of range,
a posterior fitted to another model)."""

import math

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import Predictive
from pyro.infer.autoguide import AutoDelta, AutoGuideList, AutoNormal
from pyro.infer.autoguide.initialization import InitMessenger

from pyrozoo.guides import BayesianCompressionGuide, DeltaGuide, MeanFieldNormalGuide, RadialDirectionalGuide, SemiImplicitGuide, SparseVariationalDropoutGuide
from pyrozoo.guides.initialization import init_to_network
from pyrozoo.inference import SampleGuide, evaluate, posterior_samples, predict
from pyrozoo.inference.prediction import check_posterior_matches_model
from pyrozoo.models import MLP, BayesianNeuralNetwork, CategoricalLikelihood, GaussianLikelihood, LeNet5BatchNorm, NormalPrior, RadialDirectionalPrior
from pyrozoo.models.compression_priors import GroupNormalJeffreysPrior
from pyrozoo.models.dropout_priors import LogUniformPrior
from pyrozoo.models.normal_gamma_prior import NormalGammaPrior
from tests.inference.cases import small_bnn


def _regression(device="cpu", guide_class=MeanFieldNormalGuide):
    model = small_bnn(device=device)
    x, y = torch.randn(30, 5, device=device), torch.randn(30, 1, device=device)
    guide = guide_class(model) if guide_class is DeltaGuide else guide_class(model, init_scale=0.1)
    guide(x, y)
    return model, guide, x, y


def test_regression_prediction_summaries(device):
    model, guide, x, y = _regression(device)
    pred = predict(model, guide, x, num_samples=50)
    assert pred.mean.shape == (30, 1) and pred.std.shape == (30, 1) and pred.samples.shape == (50, 30, 1)
    samples = posterior_samples(model, guide, x, num_samples=50)
    noise_var = (1.0 / samples["noise_precision"]).mean()
    assert (pred.std**2 >= noise_var * (1 - 1e-5)).all()  # total variance includes the noise


def test_chunks_share_one_posterior_draw():
    """The same input in two different chunks gets the same output within a draw (one
    network per draw), and different outputs across draws."""
    model, guide, x, _ = _regression()
    doubled = torch.cat([x[:7], x[:7]])
    out = posterior_samples(model, guide, doubled, num_samples=4, batch_size=7)["_RETURN"]
    assert out.shape == (4, 14, 1)
    assert torch.allclose(out[:, :7], out[:, 7:])
    assert not torch.allclose(out[0], out[1])


def test_deterministic_guide_chunked_equals_unchunked():
    model, guide, x, _ = _regression(guide_class=DeltaGuide)
    a = posterior_samples(model, guide, x, num_samples=2)["_RETURN"]
    b = posterior_samples(model, guide, x, num_samples=2, batch_size=4)["_RETURN"]
    assert torch.allclose(a, b)


def test_metrics_in_original_units():
    model, guide, x, y = _regression(guide_class=DeltaGuide)
    standard = evaluate(model, guide, x, y, num_samples=1)
    scale, shift = 7.5, -3.0
    original = evaluate(model, guide, x, y, num_samples=1, y_scale=scale, y_shift=shift)
    assert original["rmse"] == pytest.approx(standard["rmse"] * scale, rel=1e-5)
    assert original["test_ll"] == pytest.approx(standard["test_ll"] - math.log(scale), rel=1e-6)
    # and the log-likelihood is the Gaussian density of the targets at the MAP point
    with torch.no_grad():
        f = model.net(x)
    precision = guide.median()["noise_precision"]
    expected = dist.Normal(f, precision.rsqrt()).log_prob(y).mean()
    assert standard["test_ll"] == pytest.approx(float(expected), rel=1e-5)


@pytest.mark.parametrize("output", ["column", "vector"])
def test_original_units_count_the_jacobian_once_per_target(output):
    """Outputs of shape (n, 1) or (n,): one scalar target per example, so the log-likelihood
    in original units is lower by log(scale), whatever the number of examples."""
    from torch import nn

    from pyrozoo.models import GaussianLikelihood

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(5, 1)

        def forward(self, x):
            out = self.linear(x)
            return out if output == "column" else out.squeeze(-1)

    torch.manual_seed(0)
    model = BayesianNeuralNetwork(Net(), NormalPrior(1.0), GaussianLikelihood(30, precision=dist.Gamma(6.0, 6.0)))
    x = torch.randn(30, 5)
    y = torch.randn(30, 1) if output == "column" else torch.randn(30)
    guide = DeltaGuide(model)
    guide(x, y)
    standard = evaluate(model, guide, x, y, num_samples=1)
    original = evaluate(model, guide, x, y, num_samples=1, y_scale=2.0)
    assert original["test_ll"] == pytest.approx(standard["test_ll"] - math.log(2.0), rel=1e-6)


def test_classification_metrics(device):
    net = MLP(4, [8], 3).to(device)
    model = BayesianNeuralNetwork(net, NormalPrior(1.0), CategoricalLikelihood(50))
    x = torch.randn(20, 4, device=device)
    y = torch.randint(0, 3, (20,), device=device)
    guide = MeanFieldNormalGuide(model, init_scale=0.01)
    guide(x, y)
    metrics = evaluate(model, guide, x, y, num_samples=10)
    assert set(metrics) == {"accuracy", "error", "test_ll", "ece"}
    assert metrics["error"] == pytest.approx(100 * (1 - metrics["accuracy"]))
    pred = predict(model, guide, x, num_samples=10)
    assert torch.allclose(pred.mean.sum(-1), torch.ones(20, device=device), atol=1e-5)


def test_num_samples_must_be_positive():
    model, guide, x, _ = _regression()
    with pytest.raises(ValueError):
        predict(model, guide, x, num_samples=0)


def test_fixed_samples_evaluate_the_median_network():
    """``samples=`` conditions on given values: the posterior-median network's metrics."""
    model, guide, x, y = _regression()
    median = guide.median()
    out = posterior_samples(model, guide, x, num_samples=1, batch_size=8, samples={k: v[None] for k, v in median.items()})["_RETURN"]
    params = {k: v for k, v in median.items() if k != "noise_precision"}
    assert torch.allclose(out[0], model.net_output(params, x), atol=1e-6)


# -- bad input: every case raises a clear error before any sampling -------------------------------

VALIDATION = pytest.mark.parametrize("validation", [True, False], ids=["pyro-validation", "no-validation"])


def _classification(device="cpu", classes=3):
    model = BayesianNeuralNetwork(MLP(5, [8], classes).to(device), NormalPrior(1.0), CategoricalLikelihood(30))
    x, y = torch.randn(30, 5, device=device), torch.randint(0, classes, (30,), device=device)
    guide = MeanFieldNormalGuide(model, init_scale=0.1)
    guide(x, y)
    return model, guide, x, y


def _with(tensor, index, value):
    tensor = tensor.clone()
    tensor[index] = value
    return tensor


# (id, problem, entry point, arguments from (x, y) -> keyword arguments, error, regex the message must match)
BAD_INPUTS = [
    ("nan-x", "regression", "evaluate", lambda x, y: {"x": _with(x, (3, 1), float("nan"))}, ValueError, r"x contains 1 NaN/inf.*\(3, 1\).*finite"),
    ("inf-x", "regression", "evaluate", lambda x, y: {"x": _with(x, (0, 0), float("inf"))}, ValueError, r"x contains 1 NaN/inf.*drop or impute"),
    ("nan-x-predict", "regression", "predict", lambda x, y: {"x": _with(x, (3, 1), float("nan"))}, ValueError, r"predict: x contains 1 NaN/inf"),
    ("inf-x-predict", "classification", "predict", lambda x, y: {"x": _with(x, (5, 2), -float("inf"))}, ValueError, r"predict: x contains 1 NaN/inf"),
    ("nan-y", "regression", "evaluate", lambda x, y: {"y": _with(y, (2, 0), float("nan"))}, ValueError, r"y contains 1 NaN/inf.*targets must be finite"),
    ("inf-y", "regression", "evaluate", lambda x, y: {"y": _with(y, (7, 0), float("inf"))}, ValueError, r"y contains 1 NaN/inf"),
    ("empty", "regression", "evaluate", lambda x, y: {"x": x[:0], "y": y[:0]}, ValueError, r"x is empty: it has 0 rows.*at least one example"),
    ("empty-classification", "classification", "evaluate", lambda x, y: {"x": x[:0], "y": y[:0]}, ValueError, r"x is empty"),
    ("empty-predict", "regression", "predict", lambda x, y: {"x": x[:0]}, ValueError, r"predict: x is empty"),
    ("empty-y", "regression", "evaluate", lambda x, y: {"y": y[:0]}, ValueError, r"y is empty"),
    ("lengths", "regression", "evaluate", lambda x, y: {"y": y[:20]}, ValueError, r"different numbers of examples \(30 inputs, 20 targets\)"),
    ("zero-y-scale", "regression", "evaluate", lambda x, y: {"y_scale": 0.0}, ValueError, r"y_scale must be a positive finite number, got 0.0.*standard deviation"),
    ("negative-y-scale", "regression", "evaluate", lambda x, y: {"y_scale": -2.0}, ValueError, r"y_scale must be a positive finite number, got -2.0"),
    ("nan-y-scale", "regression", "evaluate", lambda x, y: {"y_scale": float("nan")}, ValueError, r"y_scale must be a positive finite number, got nan"),
    ("inf-y-scale", "regression", "evaluate", lambda x, y: {"y_scale": float("inf")}, ValueError, r"y_scale must be a positive finite number, got inf"),
    ("nan-y-shift", "regression", "evaluate", lambda x, y: {"y_shift": float("nan")}, ValueError, r"y_shift must be finite"),
    ("label-K", "classification", "evaluate", lambda x, y: {"y": _with(y, 4, 3)}, ValueError, r"label\(s\) \[3\] outside the likelihood's range.*3 classes are the integers 0\.\.2"),
    ("label-negative", "classification", "evaluate", lambda x, y: {"y": _with(y, 0, -1)}, ValueError, r"label\(s\) \[-1\] outside.*0\.\.2"),
    ("labels-far-out", "classification", "evaluate", lambda x, y: {"y": _with(_with(y, 1, 7), 2, 9)}, ValueError, r"label\(s\) \[7, 9\] outside"),
    ("label-non-integer", "classification", "evaluate", lambda x, y: {"y": _with(y.double(), 3, 1.5)}, ValueError, r"non-integer value\(s\) \[1.5\].*0\.\.2"),
    ("label-nan", "classification", "evaluate", lambda x, y: {"y": _with(y.double(), 3, float("nan"))}, ValueError, r"NaN/inf"),
    ("num-samples", "regression", "evaluate", lambda x, y: {"num_samples": 0}, ValueError, r"num_samples must be an int >= 1"),
    ("batch-size", "regression", "predict", lambda x, y: {"batch_size": -4}, ValueError, r"batch_size must be a positive int"),
]


@VALIDATION
@pytest.mark.parametrize("problem,entry,arguments,error,match", [c[1:] for c in BAD_INPUTS], ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_a_clear_error(problem, entry, arguments, error, match, validation, device):
    model, guide, x, y = (_regression if problem == "regression" else _classification)(device)
    pyro.enable_validation(validation)
    kwargs = {"x": x, "y": y, "num_samples": 3, **arguments(x, y)}
    if entry == "predict":
        kwargs.pop("y")
        kwargs.pop("y_scale", None)
        kwargs.pop("y_shift", None)
    with pytest.raises(error, match=match):
        {"evaluate": evaluate, "predict": predict}[entry](model, guide, **kwargs)


@VALIDATION
def test_whole_number_float_labels_are_a_type_error(validation):
    """Float labels that are whole numbers are the wrong dtype (as in the model's observation
    site): a TypeError that says how to convert them."""
    model, guide, x, y = _classification()
    pyro.enable_validation(validation)
    with pytest.raises(TypeError, match=r"integer tensor.*\.long\(\)"):
        evaluate(model, guide, x, y.float(), num_samples=3)


# -- a posterior fitted to another model -----------------------------------------------------------


def _mlp_regression(width, prior=lambda: NormalPrior(1.0)):
    return BayesianNeuralNetwork(MLP(5, [width], 1), prior(), GaussianLikelihood(30, precision=dist.Gamma(2.0, 2.0)))


def _mlp_classification(width, prior=lambda: NormalPrior(1.0)):
    return BayesianNeuralNetwork(MLP(5, [width], 3), prior(), CategoricalLikelihood(30))


def _guide_list(model):
    """As the sparse-VD UCI method builds it: dropout posterior on the weights, mean-field on
    the noise precision (which each part hides from the other)."""
    traceable = InitMessenger(init_to_network)(model)
    guide = AutoGuideList(traceable)
    guide.append(SparseVariationalDropoutGuide(model, hide=[GaussianLikelihood.PRECISION_SITE]))
    guide.append(MeanFieldNormalGuide(traceable, hide=model.random_parameter_names, init_scale=0.1))
    return guide


def _draws(guide, x, num_samples=4):
    return {name: v for name, v in Predictive(guide, num_samples=num_samples)(x).items()}


# (id, model of a given hidden width, guide factory); posterior is "guide", "sample-guide" or "samples"
GUIDE_CASES = [
    ("mean-field", _mlp_regression, lambda m: MeanFieldNormalGuide(m, init_scale=0.1), "guide"),
    ("delta", _mlp_regression, DeltaGuide, "guide"),
    ("semi-implicit", lambda w: _mlp_regression(w, lambda: NormalGammaPrior(1.0, 1.0, num_mixing=4)), lambda m: SemiImplicitGuide(m, num_mixing=3), "guide"),
    ("radial-directional", lambda w: _mlp_regression(w, RadialDirectionalPrior), RadialDirectionalGuide, "guide"),
    ("bayesian-compression", lambda w: _mlp_classification(w, GroupNormalJeffreysPrior), BayesianCompressionGuide, "guide"),
    ("sparse-vd", lambda w: _mlp_classification(w, LogUniformPrior), SparseVariationalDropoutGuide, "guide"),
    ("guide-list", lambda w: _mlp_regression(w, LogUniformPrior), _guide_list, "guide"),
    ("pyro-autonormal", _mlp_regression, AutoNormal, "guide"),
    ("pyro-autodelta", _mlp_classification, AutoDelta, "guide"),
    ("sample-guide", _mlp_regression, lambda m: MeanFieldNormalGuide(m, init_scale=0.1), "sample-guide"),
    ("samples", _mlp_regression, lambda m: MeanFieldNormalGuide(m, init_scale=0.1), "samples"),
]


def _fitted(make_model, make_guide, posterior, width=8):
    """A posterior for ``make_model(width)``: ``(guide, samples, x, y)``."""
    model = make_model(width)
    x = torch.randn(30, 5)
    y = torch.randn(30, 1) if isinstance(model.likelihood, GaussianLikelihood) else torch.randint(0, 3, (30,))
    guide = make_guide(model)
    guide(x, y)
    samples = None
    if posterior == "sample-guide":
        guide = SampleGuide(_draws(guide, x))
    elif posterior == "samples":
        samples = _draws(guide, x)
    return guide, samples, x, y


def _run(entry, model, guide, samples, x, y, **kwargs):
    num_samples = len(guide.samples[next(iter(guide.samples))]) if isinstance(guide, SampleGuide) else 4
    if entry == "predict":
        return predict(model, guide, x, num_samples=num_samples, samples=samples, **kwargs)
    return evaluate(model, guide, x, y, num_samples=num_samples, samples=samples, **kwargs)


@VALIDATION
@pytest.mark.parametrize("entry", ["evaluate", "predict"])
@pytest.mark.parametrize("make_model,make_guide,posterior", [c[1:] for c in GUIDE_CASES], ids=[c[0] for c in GUIDE_CASES])
def test_posterior_of_another_width_raises(make_model, make_guide, posterior, entry, validation):
    """Fitted with 8 hidden units, evaluated with a 16-unit model: Pyro would replay the
    8-unit values and return metrics of the guide's network. The message names the first
    mismatching site (or point estimate) with both shapes."""
    guide, samples, x, y = _fitted(make_model, make_guide, posterior, width=8)
    pyro.enable_validation(validation)
    with pytest.raises(ValueError, match=r"\(8,.*\(16,.*different model"):
        _run(entry, make_model(16), guide, samples, x, y)


@pytest.mark.parametrize("make_model,make_guide,posterior", [c[1:] for c in GUIDE_CASES], ids=[c[0] for c in GUIDE_CASES])
def test_posterior_of_the_same_model_still_evaluates(make_model, make_guide, posterior):
    guide, samples, x, y = _fitted(make_model, make_guide, posterior, width=8)
    model = make_model(8)
    model.load_state_dict(model.state_dict())  # a second instance of the same architecture is fine
    for batch_size in (None, 7):
        metrics = _run("evaluate", model, guide, samples, x, y, batch_size=batch_size)
        assert all(math.isfinite(v) for v in metrics.values())


def test_the_mismatch_names_the_site_and_both_shapes():
    guide, _, x, y = _fitted(_mlp_regression, lambda m: MeanFieldNormalGuide(m, init_scale=0.1), "guide", width=8)
    with pytest.raises(ValueError, match=r"site '0\.weight' has shape \(8, 5\) in the guide \(MeanFieldNormalGuide\) but \(16, 5\) in the model"):
        evaluate(_mlp_regression(16), guide, x, y, num_samples=2)


def _fixed_precision_model(width=8):
    return BayesianNeuralNetwork(MLP(5, [width], 1), NormalPrior(1.0), GaussianLikelihood(30, precision=4.0))


@VALIDATION
def test_guide_site_the_model_lacks_raises(validation):
    """A guide with a noise-precision site, for a model whose precision is fixed."""
    guide, _, x, y = _fitted(_mlp_regression, DeltaGuide, "guide")
    pyro.enable_validation(validation)
    with pytest.raises(ValueError, match=r"model does not sample the latent site\(s\) \['noise_precision'\] of the guide \(DeltaGuide\)"):
        evaluate(_fixed_precision_model(), guide, x, y, num_samples=2)


@VALIDATION
def test_model_site_the_guide_does_not_cover_raises(validation):
    """A zoo guide fitted with a fixed precision, for a model that infers it: the precision
    would silently come from its prior."""
    guide, _, x, y = _fitted(_fixed_precision_model, DeltaGuide, "guide")
    pyro.enable_validation(validation)
    with pytest.raises(ValueError, match=r"\['noise_precision'\] that the guide \(DeltaGuide\) does not cover.*hide="):
        evaluate(_mlp_regression(8), guide, x, y, num_samples=2)


def test_site_hidden_on_purpose_is_left_to_the_prior():
    model = _mlp_regression(8)
    x, y = torch.randn(30, 5), torch.randn(30, 1)
    guide = DeltaGuide(model, hide=[GaussianLikelihood.PRECISION_SITE])
    guide(x, y)
    assert math.isfinite(evaluate(model, guide, x, y, num_samples=2)["test_ll"])


def test_the_check_changes_no_random_stream_and_no_module_state():
    """One extra trace of the model and the guide, without side effects: draws after it are
    those without it, and batch-norm statistics and training flags are as they were."""
    model = BayesianNeuralNetwork(LeNet5BatchNorm(), NormalPrior(1.0), CategoricalLikelihood(30))
    x, y = torch.randn(6, 1, 28, 28), torch.randint(0, 10, (6,))
    guide = MeanFieldNormalGuide(model, init_scale=0.01)
    guide(x, y)
    model.train()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    output = check_posterior_matches_model(model, guide, x)
    assert output.shape == (2, 10)
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert all(m.training for m in model.modules())
