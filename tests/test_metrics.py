"""Metrics on hand-checkable cases."""

import math

import numpy as np
import pytest
import torch

from scipy.stats import norm

from pyrozoo import metrics
from pyrozoo.inference.uncertainty_decomposition import classification_uncertainty
from pyrozoo.metrics import (
    accuracy,
    agreement,
    auroc,
    expected_calibration_error,
    interval_coverage,
    interval_coverage_from_samples,
    log_mean_exp,
    ood_auroc,
    pit_from_samples,
    posterior_moment_errors,
    reliability_diagram,
    rmse,
    total_variation,
    wasserstein2_gaussian,
    wasserstein2_predictive,
)


def test_rmse_hand_case(device, dtype):
    mean = torch.tensor([1.0, 2.0, 3.0], device=device, dtype=dtype)
    y = torch.tensor([1.0, 2.0, 5.0], device=device, dtype=dtype)
    assert rmse(mean, y) == pytest.approx(math.sqrt(4 / 3), rel=1e-6)
    assert rmse(y, y) == 0.0


def test_rmse_column_vector_against_flat_targets():
    """A (n, 1) prediction against (n,) targets is compared elementwise, not broadcast to (n, n)."""
    mean = torch.tensor([[0.0], [1.0], [2.0], [3.0]])
    y = torch.tensor([1.0, 1.0, 1.0, 1.0])
    assert rmse(mean, y) == pytest.approx(math.sqrt((1 + 0 + 1 + 4) / 4))


def test_accuracy_hand_case(device):
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.2, 0.5, 0.3], [0.4, 0.35, 0.25]], device=device)
    y = torch.tensor([0, 2, 0, 1], device=device)
    assert accuracy(probs, y) == pytest.approx(0.5)


def test_ece_hand_case():
    """Bins of width 0.1: two examples at confidence 0.95 (one right) and two at 0.55 (both
    right): gaps |0.5 - 0.95| and |1 - 0.55|, each bin holds half the data -> ECE 0.45."""
    probs = torch.tensor([[0.95, 0.05], [0.95, 0.05], [0.55, 0.45], [0.45, 0.55]])
    y = torch.tensor([0, 1, 0, 1])
    assert expected_calibration_error(probs, y, num_bins=10) == pytest.approx(0.45)


def test_ece_zero_for_perfectly_calibrated_bins():
    """In every bin the accuracy equals the confidence: 8 of 10 right at 0.8, 3 of 5 at 0.6,
    all right at confidence 1."""
    probs = torch.cat([
        torch.tensor([[0.8, 0.2]]).expand(10, 2),
        torch.tensor([[0.4, 0.6]]).expand(5, 2),
        torch.tensor([[1.0, 0.0]]).expand(3, 2),
    ])
    y = torch.tensor([0] * 8 + [1] * 2 + [1] * 3 + [0] * 2 + [0] * 3)
    assert expected_calibration_error(probs, y, num_bins=15) == pytest.approx(0.0, abs=1e-7)


def test_ece_overconfident_is_positive_and_bounded():
    probs = torch.tensor([[0.99, 0.01]]).expand(100, 2)
    y = torch.cat([torch.zeros(50, dtype=torch.long), torch.ones(50, dtype=torch.long)])
    assert expected_calibration_error(probs, y) == pytest.approx(0.49, abs=1e-6)
    assert 0 <= expected_calibration_error(torch.softmax(torch.randn(50, 4), -1), torch.randint(0, 4, (50,))) <= 1


def test_ece_one_bin_is_the_overall_gap():
    probs = torch.softmax(torch.randn(64, 5, generator=torch.Generator().manual_seed(0)), -1)
    y = torch.randint(0, 5, (64,), generator=torch.Generator().manual_seed(1))
    gap = abs(accuracy(probs, y) - float(probs.max(-1).values.mean()))
    assert expected_calibration_error(probs, y, num_bins=1) == pytest.approx(gap, rel=1e-5)


def test_ece_bad_bins():
    with pytest.raises(ValueError):
        expected_calibration_error(torch.tensor([[0.5, 0.5]]), torch.tensor([0]), num_bins=0)


def test_log_mean_exp_against_numpy(dtype):
    x = torch.tensor([[0.0, 1.0], [2.0, -3.0], [0.5, 0.5]], dtype=dtype)
    expected = np.log(np.exp(x.double().numpy()).mean(0))
    np.testing.assert_allclose(log_mean_exp(x, 0).double().numpy(), expected, rtol=1e-6)
    expected = np.log(np.exp(x.double().numpy()).mean(1))
    np.testing.assert_allclose(log_mean_exp(x, 1).double().numpy(), expected, rtol=1e-6)


def test_log_mean_exp_is_stable():
    x = torch.tensor([1000.0, 1000.0 + math.log(3)])
    assert log_mean_exp(x).item() == pytest.approx(1000 + math.log(2), rel=1e-6)
    x = torch.tensor([-1000.0, -1000.0])
    assert log_mean_exp(x).item() == pytest.approx(-1000.0)


# (id, metric call, regex the ValueError must match)
BAD_METRIC_INPUTS = [
    ("rmse-empty", lambda: rmse(torch.zeros(0), torch.zeros(0)), "no targets"),
    ("rmse-sizes", lambda: rmse(torch.zeros(4, 2), torch.zeros(4)), r"predictions of shape \(4, 2\) do not match targets of shape \(4,\)"),
    ("accuracy-label-shape", lambda: accuracy(torch.full((4, 3), 1 / 3), torch.zeros(4, 1, dtype=torch.long)), r"expected labels of shape \(4,\)"),
    ("accuracy-empty", lambda: accuracy(torch.zeros(0, 3), torch.zeros(0, dtype=torch.long)), "no examples"),
    ("accuracy-label-K", lambda: accuracy(torch.full((4, 3), 1 / 3), torch.tensor([0, 1, 3, 2])), r"outside the 3 classes 0\.\.2"),
    ("ece-negative-label", lambda: expected_calibration_error(torch.full((4, 3), 1 / 3), torch.tensor([0, -1, 2, 2])), r"labels range over \[-1, 2\]"),
    ("reliability-label-K", lambda: reliability_diagram(torch.full((4, 2), 0.5), torch.tensor([0, 1, 2, 1])), "outside the 2 classes"),
    ("coverage-nan-level", lambda: interval_coverage(torch.rand(5), [0.5, float("nan")]), r"levels must lie in \[0, 1\]"),
    ("coverage-empty", lambda: interval_coverage(torch.zeros(0), [0.5]), "pit is empty"),
    ("coverage-samples-shape", lambda: interval_coverage_from_samples(torch.zeros(10, 4), torch.zeros(5), [0.5]), r"pass the draws as \(S, 5\)"),
    ("pit-no-draws", lambda: pit_from_samples(torch.zeros(0, 5), torch.zeros(5)), "no draws or no targets"),
    ("agreement-shapes", lambda: agreement(torch.full((8, 4, 3), 1 / 3), torch.full((4, 3), 1 / 3)), r"averaged over S first"),
    ("agreement-empty", lambda: agreement(torch.zeros(0, 3), torch.zeros(0, 3)), "no test points"),
    ("tv-logits", lambda: total_variation(torch.randn(4, 3), torch.full((4, 3), 1 / 3)), "pass their softmax"),
    ("w2-test-points", lambda: wasserstein2_predictive(torch.zeros(10, 4), torch.zeros(10, 5)), r"\(S, n\) and \(R, n\)"),
    ("w2-nan", lambda: wasserstein2_predictive(torch.tensor([[0.0], [float("nan")]]), torch.zeros(3, 1)), "NaN or infinite"),
    ("w2-empty", lambda: wasserstein2_predictive(torch.zeros(0, 4), torch.zeros(3, 4)), "no draws or no test points"),
    ("w2-gauss-std", lambda: wasserstein2_gaussian(0.0, -1.0, 0.0, 1.0), "nonnegative"),
    ("w2-gauss-shapes", lambda: wasserstein2_gaussian(torch.zeros(3), 1.0, torch.zeros(4), 1.0), "do not broadcast"),
    ("moments-one-draw", lambda: posterior_moment_errors(torch.zeros(1, 2), torch.ones(2), torch.eye(2)), "at least two draws"),
    ("moments-dimension", lambda: posterior_moment_errors((torch.ones(3), torch.eye(3)), torch.ones(2), torch.eye(2)), r"dimension D = 2"),
    ("moments-exact-shapes", lambda: posterior_moment_errors((torch.ones(2), torch.eye(2)), torch.ones(2), torch.eye(3)), r"pass a \(D,\) mean and a \(D, D\) covariance"),
    ("moments-zero-mean", lambda: posterior_moment_errors((torch.ones(2), torch.eye(2)), torch.zeros(2), torch.eye(2)), "relative error is undefined"),
    ("auroc-empty", lambda: auroc(torch.zeros(0), torch.ones(3)), "0 in-distribution and 3 out-of-distribution"),
    ("auroc-nan", lambda: auroc(torch.tensor([0.0, float("nan")]), torch.ones(3)), "NaN"),
    ("ood-unknown-score", lambda: ood_auroc({"total": torch.ones(2)}, {"total": torch.ones(2)}, "variance"), r"not a part of the split"),
]


@pytest.mark.parametrize("call,match", [c[1:] for c in BAD_METRIC_INPUTS], ids=[c[0] for c in BAD_METRIC_INPUTS])
def test_bad_metric_inputs_raise(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_all_names_the_public_functions():
    for name in metrics.__all__:
        assert callable(getattr(metrics, name)), name
    assert {"agreement", "total_variation", "wasserstein2_predictive", "wasserstein2_gaussian", "interval_coverage_from_samples", "posterior_moment_errors", "auroc", "ood_auroc"} <= set(metrics.__all__)


# --- against a reference posterior: classification ----------------------------------------

# (probs, reference probs): argmax agrees at rows 0 and 2; row TVs 0.1, 0.3, 0, 0.4
PROBS = [[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.5, 0.4, 0.1], [0.2, 0.2, 0.6]]
REFERENCE_PROBS = [[0.6, 0.3, 0.1], [0.1, 0.6, 0.3], [0.5, 0.4, 0.1], [0.6, 0.2, 0.2]]


def test_agreement_and_total_variation_hand_case(device, dtype):
    p = torch.tensor(PROBS, device=device, dtype=dtype)
    q = torch.tensor(REFERENCE_PROBS, device=device, dtype=dtype)
    assert agreement(p, q) == 0.5
    assert total_variation(p, q) == pytest.approx((0.1 + 0.3 + 0.0 + 0.4) / 4, abs=1e-6)
    assert total_variation(q, p) == pytest.approx(total_variation(p, q), abs=1e-7)


def test_identical_predictives_agree_with_zero_total_variation(dtype):
    p = torch.softmax(torch.randn(50, 10, generator=torch.Generator().manual_seed(0), dtype=dtype), -1)
    assert agreement(p, p) == 1.0
    assert total_variation(p, p) == 0.0


def test_total_variation_of_disjoint_predictives_is_one_and_agreement_reads_logits():
    one_hot = torch.eye(3)
    assert total_variation(one_hot, one_hot.roll(1, 0)) == pytest.approx(1.0)
    assert agreement(one_hot, one_hot.roll(1, 0)) == 0.0
    logits = torch.log(torch.tensor(PROBS))
    assert agreement(logits, torch.tensor(REFERENCE_PROBS)) == agreement(torch.tensor(PROBS), torch.tensor(REFERENCE_PROBS))


# --- against a reference posterior: regression --------------------------------------------


def test_w2_of_identical_draws_is_zero(device, dtype):
    x = torch.randn(200, 7, generator=torch.Generator().manual_seed(0), dtype=dtype).to(device)
    assert wasserstein2_predictive(x, x) == 0.0
    assert wasserstein2_predictive(x, x.flip(0)) == 0.0  # the order of the draws does not matter


@pytest.mark.parametrize("shift", [-2.5, 0.75])
@pytest.mark.parametrize("copies", [1, 3], ids=["same-size", "three-times-the-draws"])
def test_w2_of_a_shift_is_its_size(dtype, shift, copies):
    """Shifting a predictive by c moves every quantile by c: W2 = |c|, whatever the numbers
    of draws (repeating each draw leaves the empirical distribution unchanged)."""
    x = torch.randn(100, 5, generator=torch.Generator().manual_seed(1), dtype=dtype)
    w2 = wasserstein2_predictive(x.repeat(copies, 1) + shift, x, per_point=True)
    assert w2.shape == (5,) and w2.dtype == dtype
    torch.testing.assert_close(w2, torch.full((5,), abs(shift), dtype=dtype), rtol=0, atol=10 * torch.finfo(dtype).eps * 4)


def test_w2_unequal_sizes_hand_case():
    """Quantile functions: {0, 1} is 0 on (0, 1/2], 1 on (1/2, 1]; {0, 0, 3} is 0 on (0, 2/3],
    3 on (2/3, 1]. W2^2 = (1/6) * 1^2 + (1/3) * 2^2 = 3/2."""
    x = torch.tensor([[1.0], [0.0]], dtype=torch.float64)
    y = torch.tensor([[0.0], [3.0], [0.0]], dtype=torch.float64)
    assert wasserstein2_predictive(x, y) == pytest.approx(math.sqrt(1.5), rel=1e-12)
    assert wasserstein2_predictive(y, x) == pytest.approx(math.sqrt(1.5), rel=1e-12)


@pytest.mark.parametrize("S,R", [(37, 53), (100, 40), (7, 7), (1, 9)])
def test_w2_unequal_sizes_equals_the_equal_size_formula_on_repeated_draws(S, R, dtype):
    """Repeating each of S draws L/S times (L = lcm(S, R)) keeps the distribution, and with L
    draws on both sides W2^2 is the mean squared difference of the sorted draws."""
    rng = np.random.default_rng(S * 100 + R)
    x, y = rng.normal(size=(S, 4)), rng.normal(1.0, 2.0, size=(R, 4))
    L = S * R // math.gcd(S, R)
    expected = np.sqrt(((np.repeat(np.sort(x, 0), L // S, 0) - np.repeat(np.sort(y, 0), L // R, 0)) ** 2).mean(0))
    w2 = wasserstein2_predictive(torch.tensor(x, dtype=dtype), torch.tensor(y, dtype=dtype), per_point=True)
    np.testing.assert_allclose(w2.double().numpy(), expected, rtol=1e-5 if dtype == torch.float32 else 1e-12)


def _w2_to_gaussian(draws: np.ndarray, mean: float, std: float) -> float:
    """Exact W2 between the empirical distribution of ``draws`` and N(mean, std^2): on the step
    ((i-1)/n, i/n] of the empirical quantile function, with t = Phi^{-1}(u),
    int (z_i - t)^2 du = z_i^2 / n - 2 z_i [-phi(t)] + [Phi(t) - t phi(t)] over the step's ends."""
    z = np.sort((draws - mean) / std)
    n = len(z)
    t = norm.ppf(np.arange(n + 1) / n)  # -inf, ..., +inf
    phi = norm.pdf(t)
    t_phi = np.zeros_like(t)  # t phi(t) -> 0 at t = -inf, +inf
    t_phi[1:-1] = t[1:-1] * phi[1:-1]
    squared = (z**2 / n - 2 * z * (phi[:-1] - phi[1:]) + 1 / n - (t_phi[1:] - t_phi[:-1])).sum()
    return std * math.sqrt(max(squared, 0.0))


@pytest.mark.parametrize("S,R", [(500, 500), (400, 700)])
def test_w2_of_gaussian_draws_against_the_closed_form(S, R, dtype):
    """Seeded draws of N(m1, s1^2) and N(m2, s2^2) at 20 test points. W2 is a metric, so the
    empirical distance is within W2(P_S, P) + W2(Q_R, Q) of the closed form, both computed
    exactly for the drawn samples (of order sqrt(log log S / S), Bobkov & Ledoux 2019): the
    tolerance comes from the sample sizes and the samples, not from a chosen number."""
    rng = np.random.default_rng(S + R)
    n = 20
    m1, s1 = rng.normal(size=n), rng.uniform(0.5, 2.0, size=n)
    m2, s2 = m1 + rng.choice([-1.0, 1.0], size=n) * rng.uniform(1.0, 3.0, size=n), rng.uniform(0.5, 2.0, size=n)
    x, y = rng.normal(m1, s1, size=(S, n)), rng.normal(m2, s2, size=(R, n))
    exact = wasserstein2_gaussian(torch.tensor(m1), torch.tensor(s1), torch.tensor(m2), torch.tensor(s2), per_point=True).numpy()
    sampling = np.array([_w2_to_gaussian(x[:, i], m1[i], s1[i]) + _w2_to_gaussian(y[:, i], m2[i], s2[i]) for i in range(n)])
    assert sampling.max() < 0.25 * exact.min()  # the test can fail: a W1 (or a mis-sorted W2) would leave the band
    w2 = wasserstein2_predictive(torch.tensor(x, dtype=dtype), torch.tensor(y, dtype=dtype), per_point=True).double().numpy()
    assert np.all(np.abs(w2 - exact) <= sampling + 1e-5 * exact)
    assert wasserstein2_predictive(torch.tensor(x, dtype=dtype), torch.tensor(y, dtype=dtype)) == pytest.approx(w2.mean(), rel=1e-6)


def test_w2_gaussian_closed_form(dtype):
    """W2(N(0, 1), N(3, 5^2)) = sqrt(3^2 + 4^2) = 5; a shift c of the mean alone gives |c|;
    the mean over test points is of the distances, not of their squares."""
    assert wasserstein2_gaussian(torch.tensor(0.0, dtype=dtype), 1.0, 3.0, 5.0) == pytest.approx(5.0)
    mean, std = torch.randn(6, dtype=dtype), torch.rand(6, dtype=dtype)
    assert wasserstein2_gaussian(mean, std, mean, std) == 0.0
    per_point = wasserstein2_gaussian(mean, std, mean - 1.5, std, per_point=True)
    assert per_point.dtype == dtype
    torch.testing.assert_close(per_point, torch.full((6,), 1.5, dtype=dtype))
    assert wasserstein2_gaussian(torch.zeros(2), torch.ones(2), torch.tensor([3.0, 0.0]), torch.tensor([5.0, 1.0])) == pytest.approx(2.5)


# --- predictive intervals from samples ---------------------------------------------------


def test_pit_and_coverage_from_samples_hand_case():
    """Draws 1, 2, 3, 4 at every point. PITs: y=0 -> 0; y=2 -> (1 + 1/2)/4; y=2.5 -> 2/4; y=5 -> 1;
    y=4 -> (3 + 1/2)/4. Central p-interval: |PIT - 1/2| <= p/2."""
    samples = torch.arange(1.0, 5.0)[:, None].expand(4, 5)
    y = torch.tensor([0.0, 2.0, 2.5, 5.0, 4.0])
    torch.testing.assert_close(pit_from_samples(samples, y), torch.tensor([0.0, 0.375, 0.5, 1.0, 0.875]))
    coverage = interval_coverage_from_samples(samples, y, [0.0, 0.5, 0.8, 1.0])
    torch.testing.assert_close(coverage, torch.tensor([1 / 5, 2 / 5, 3 / 5, 1.0]))


def test_coverage_of_draws_from_the_true_predictive_is_the_level(dtype):
    """Draws and target from the same continuous predictive: the PIT is k/S with k uniform on
    0..S, so the coverage of the 4000 independent points is binomial around
    #{k: |k/S - 1/2| <= p/2} / (S + 1); 4.5 standard deviations of it are allowed. The same
    check fails for a predictive half as wide."""
    S, n, levels = 99, 4000, [0.5, 0.8, 0.9, 0.95]
    g = torch.Generator().manual_seed(0)
    mean, std = torch.randn(n, generator=g, dtype=dtype), 0.5 + torch.rand(n, generator=g, dtype=dtype)
    y = mean + std * torch.randn(n, generator=g, dtype=dtype)
    samples = mean + std * torch.randn(S, n, generator=g, dtype=dtype)
    expected = torch.tensor([sum(abs(k / S - 0.5) <= p / 2 for k in range(S + 1)) / (S + 1) for p in levels], dtype=torch.float64)
    assert (expected - torch.tensor(levels, dtype=torch.float64)).abs().max() <= 2 / (S + 1)
    tolerance = 4.5 * (expected * (1 - expected) / n).sqrt()
    coverage = interval_coverage_from_samples(samples, y, levels)
    assert coverage.dtype == dtype
    assert ((coverage.double() - expected).abs() <= tolerance).all(), (coverage, expected)
    narrow = mean + 0.5 * (samples - mean)
    assert ((interval_coverage_from_samples(narrow, y, levels).double() - expected).abs() > tolerance).all()


# --- against an exact posterior ----------------------------------------------------------

EXACT_MEAN = [3.0, 4.0]
EXACT_COV = [[2.0, 0.0], [0.0, 2.0]]


def test_posterior_moment_errors_zero_for_exact_moments(dtype):
    mean, cov = torch.tensor(EXACT_MEAN, dtype=dtype), torch.tensor(EXACT_COV, dtype=dtype)
    assert posterior_moment_errors((mean, cov), mean, cov) == {"mean": 0.0, "cov": 0.0}


def test_posterior_moment_errors_of_draws_with_the_exact_moments(dtype):
    """Draws whitened to sample mean 0 and sample covariance I (divisor S - 1), then mapped
    through the exact posterior's Cholesky factor, have exactly its moments: errors at rounding level."""
    exact_mean = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    a = torch.tensor([[1.0, 0.0, 0.0], [0.5, 2.0, 0.0], [-0.3, 0.2, 0.7]], dtype=torch.float64)
    exact_cov = a @ a.T
    z = torch.randn(300, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    z = z - z.mean(0)
    z = torch.linalg.solve_triangular(torch.linalg.cholesky(torch.cov(z.T)), z.T, upper=False).T
    draws = (exact_mean + z @ torch.linalg.cholesky(exact_cov).T).to(dtype)
    errors = posterior_moment_errors(draws, exact_mean.to(dtype), exact_cov.to(dtype))
    assert errors["mean"] < 100 * torch.finfo(dtype).eps and errors["cov"] < 100 * torch.finfo(dtype).eps


def test_posterior_moment_errors_perturbed_hand_case(dtype):
    """m* = (3, 4), |m*| = 5, m = m* + (0, 1): 1/5. C* = 2 I, |C*|_F = 2 sqrt(2); C = C* plus
    ones off the diagonal, |C - C*|_F = sqrt(2): 1/2. Scaling both sides leaves them."""
    exact_mean, exact_cov = torch.tensor(EXACT_MEAN, dtype=dtype), torch.tensor(EXACT_COV, dtype=dtype)
    mean, cov = exact_mean + torch.tensor([0.0, 1.0], dtype=dtype), exact_cov + torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=dtype)
    errors = posterior_moment_errors((mean, cov), exact_mean, exact_cov)
    assert errors == pytest.approx({"mean": 0.2, "cov": 0.5}, rel=1e-6)
    assert posterior_moment_errors((7 * mean, 7 * cov), 7 * exact_mean, 7 * exact_cov) == pytest.approx(errors, rel=1e-6)


def test_posterior_moment_errors_use_the_unbiased_sample_covariance():
    """Draws 0 and 2: mean 1, variance 2 with divisor S - 1 (1 with divisor S, which would give error 1/2)."""
    draws = torch.tensor([[0.0], [2.0]])
    assert posterior_moment_errors(draws, torch.tensor([1.0]), torch.tensor([[2.0]])) == {"mean": 0.0, "cov": 0.0}


# --- out-of-distribution detection --------------------------------------------------------


def test_auroc_known_answers(device):
    low, high = torch.arange(5.0, device=device), torch.arange(5.0, device=device) + 10
    assert auroc(low, high) == 1.0
    assert auroc(high, low) == 0.0
    assert auroc(low, low) == 0.5
    assert auroc(torch.zeros(3, device=device), torch.zeros(7, device=device)) == 0.5
    # out 0.4 beats in 0.1 and ties the two 0.4s (1/2 each), out 0.8 beats all three: 5 of 6 pairs
    assert auroc(torch.tensor([0.1, 0.4, 0.4], device=device), torch.tensor([0.4, 0.8], device=device)) == pytest.approx(5 / 6, abs=1e-15)


def test_auroc_equals_the_pairwise_count_with_ties():
    g = torch.Generator().manual_seed(0)
    scores_in, scores_out = torch.randint(0, 6, (57,), generator=g).float(), torch.randint(2, 9, (41,), generator=g).float()
    diff = scores_out[:, None] - scores_in[None, :]
    pairwise = float(((diff > 0).double() + 0.5 * (diff == 0).double()).mean())
    assert auroc(scores_in, scores_out) == pytest.approx(pairwise, abs=1e-15)
    assert auroc(scores_in, scores_out) + auroc(scores_out, scores_in) == pytest.approx(1.0, abs=1e-15)
    assert auroc(scores_in.long(), scores_out.long()) == auroc(scores_in, scores_out)


def test_ood_auroc_on_uncertainty_splits():
    """In distribution every draw says (1/2, 1/2): entropy log 2, mutual information 0
    (aleatoric). Out of distribution the draws are one-hot and disagree: the same entropy
    log 2, mutual information log 2 (epistemic). Entropy cannot tell them apart (0.5); mutual
    information separates them (1)."""
    S, n = 4, 6
    in_probs = torch.full((S, n, 2), 0.5)
    out_probs = torch.eye(2).repeat(S // 2, 1)[:, None, :].expand(S, n, 2)
    split_in, split_out = classification_uncertainty(in_probs), classification_uncertainty(out_probs)
    assert ood_auroc(split_in, split_out, "entropy") == 0.5
    assert ood_auroc(split_in, split_out, "mutual_information") == 1.0
    assert ood_auroc(split_in, split_out, "epistemic") == 1.0
    assert ood_auroc(split_out, split_in, "mutual_information") == 0.0


def test_ood_auroc_wants_the_split_not_probabilities():
    with pytest.raises(TypeError, match="call auroc"):
        ood_auroc(torch.full((4, 6, 2), 0.5), torch.full((4, 6, 2), 0.5))
