"""FGSM: the attack direction of the posterior-averaged loss, clipping, and accuracy tables."""

import pytest
import torch

from pyrozoo.robustness import fgsm_accuracy, fgsm_attack


def _ensemble(weights):
    """Averaged softmax probabilities of linear models ``x @ W_s``."""

    def probs_fn(x):
        return torch.stack([torch.softmax(x.flatten(1) @ w, -1) for w in weights]).mean(0)

    return probs_fn


def _analytic_grad(weights, x, y):
    """Gradient of ``-log mean_s softmax(x W_s)_y`` written out: ``-(1/pbar) mean_s p_s,y (W_s[:, y] - W_s p_s)``."""
    ps = [torch.softmax(x @ w, -1) for w in weights]
    pbar = torch.stack(ps).mean(0)
    grad = torch.zeros_like(x)
    for w, p in zip(weights, ps):
        py = p.gather(1, y[:, None])
        grad -= py * (w[:, y].T - p @ w.T) / len(weights)
    return grad / pbar.gather(1, y[:, None])


@pytest.mark.parametrize("num_models", [1, 3])
def test_attack_follows_sign_of_averaged_loss_gradient(num_models, device, dtype):
    g = torch.Generator().manual_seed(0)
    weights = [torch.randn(6, 4, generator=g, dtype=dtype).to(device) for _ in range(num_models)]
    x = torch.rand(50, 6, generator=g, dtype=dtype).to(device)
    y = torch.randint(0, 4, (50,), generator=g).to(device)
    eps = 0.1
    x_adv = fgsm_attack(_ensemble(weights), x, y, eps)
    expected = (x + eps * _analytic_grad(weights, x, y).sign()).clamp(0, 1)
    assert torch.equal(x_adv, expected)


def test_perturbation_is_bounded_and_clipped(device):
    g = torch.Generator().manual_seed(1)
    weights = [torch.randn(6, 3, generator=g).to(device)]
    x = torch.rand(200, 6, generator=g).to(device)
    x[:, 0] = 0.0
    x[:, 1] = 1.0
    y = torch.randint(0, 3, (200,), generator=g).to(device)
    for eps in (0.05, 0.5, 2.0):
        x_adv = fgsm_attack(_ensemble(weights), x, y, eps)
        assert x_adv.min() >= 0 and x_adv.max() <= 1
        assert (x_adv - x).abs().max() <= eps + 1e-7
        assert not x_adv.requires_grad
    assert torch.equal(fgsm_attack(_ensemble(weights), x, y, 0.0), x)


def test_attack_lowers_the_true_class_probability(device):
    """A small step along the sign of the gradient decreases p(y|x) (first-order argument)."""
    g = torch.Generator().manual_seed(2)
    weights = [torch.randn(6, 3, generator=g, dtype=torch.float64).to(device) for _ in range(2)]
    x = 0.25 + 0.5 * torch.rand(100, 6, generator=g, dtype=torch.float64).to(device)
    y = torch.randint(0, 3, (100,), generator=g).to(device)
    fn = _ensemble(weights)
    before = fn(x).gather(1, y[:, None])
    after = fn(fgsm_attack(fn, x, y, 1e-4)).gather(1, y[:, None])
    assert (after < before).all()


def test_accuracy_table(device):
    g = torch.Generator().manual_seed(3)
    weights = [torch.randn(6, 3, generator=g).to(device)]
    x = torch.rand(101, 6, generator=g).to(device)
    fn = _ensemble(weights)
    y = fn(x).argmax(1)  # labels the model gets right: clean accuracy 1
    table = fgsm_accuracy(fn, x, y, [0.0, 0.05, 0.3], batch_size=17)
    assert list(table.columns) == ["epsilon", "accuracy"]
    assert table.epsilon.tolist() == [0.0, 0.05, 0.3]
    assert table.accuracy.iloc[0] == 1.0
    # batching does not change a deterministic model's result
    whole = fgsm_accuracy(fn, x, y, [0.0, 0.05, 0.3], batch_size=None)
    assert table.accuracy.tolist() == whole.accuracy.tolist()
    # the accuracy on the attacked inputs is the fraction the model still classifies correctly
    x_adv = fgsm_attack(fn, x, y, 0.3)
    assert table.accuracy.iloc[2] == pytest.approx(float((fn(x_adv).argmax(1) == y).float().mean()))


def test_bad_arguments_raise():
    fn = _ensemble([torch.randn(4, 3)])
    x, y = torch.rand(5, 4), torch.tensor([0, 1, 2, 0, 1])
    with pytest.raises(ValueError, match="non-negative"):
        fgsm_attack(fn, x, y, -0.1)
    with pytest.raises(ValueError, match="non-negative"):
        fgsm_accuracy(fn, x, y, [0.1, float("nan")])
    with pytest.raises(ValueError, match="one label per input"):
        fgsm_attack(fn, x, y[:3], 0.1)
    with pytest.raises(TypeError, match="integer"):
        fgsm_attack(fn, x, y.float(), 0.1)
    with pytest.raises(ValueError, match="labels must lie"):
        fgsm_attack(fn, x, torch.tensor([0, 1, 2, 3, 1]), 0.1)
    with pytest.raises(ValueError, match="batch_size"):
        fgsm_accuracy(fn, x, y, [0.1], batch_size=0)
    with pytest.raises(ValueError, match="at least one"):
        fgsm_accuracy(fn, x, y, [])
    with pytest.raises(ValueError, match=r"\(n, classes\)"):
        fgsm_attack(lambda x: x.sum(1), x, y, 0.1)


def test_attacking_the_prediction_is_attacking_the_predicted_label(device, dtype):
    g = torch.Generator().manual_seed(4)
    weights = [torch.randn(6, 4, generator=g, dtype=dtype).to(device) for _ in range(2)]
    x = torch.rand(60, 6, generator=g, dtype=dtype).to(device)
    y = torch.randint(0, 4, (60,), generator=g).to(device)
    fn = _ensemble(weights)
    predicted = fn(x).argmax(1)
    assert not torch.equal(predicted, y)  # the two targets differ on some inputs
    assert torch.equal(fgsm_attack(fn, x, y, 0.1, target="prediction"), fgsm_attack(fn, x, predicted, 0.1))
    assert torch.equal(fgsm_attack(fn, x, y, 0.1, target="label"), fgsm_attack(fn, x, y, 0.1))


def test_inputs_are_crafted_with_the_attack_model_and_scored_with_the_evaluated_one(device):
    g = torch.Generator().manual_seed(5)
    source, evaluated = _ensemble([torch.randn(6, 3, generator=g).to(device)]), _ensemble([torch.randn(6, 3, generator=g).to(device)])
    x = torch.rand(80, 6, generator=g).to(device)
    y = evaluated(x).argmax(1)
    eps = [0.0, 0.2]
    transfer = fgsm_accuracy(evaluated, x, y, eps, attack_probs_fn=source, target="prediction")
    x_adv = fgsm_attack(source, x, y, 0.2, target="prediction")
    assert transfer.accuracy.tolist() == [1.0, pytest.approx(float((evaluated(x_adv).argmax(1) == y).float().mean()))]
    # the default crafts against the evaluated model itself
    white_box = fgsm_accuracy(evaluated, x, y, eps)
    assert white_box.accuracy.tolist() == fgsm_accuracy(evaluated, x, y, eps, attack_probs_fn=evaluated).accuracy.tolist()
    # a model whose loss does not depend on x gives no direction: nothing moves
    flat = fgsm_accuracy(evaluated, x, y, eps, attack_probs_fn=lambda inputs: torch.full((len(inputs), 3), 1 / 3, device=device) + 0 * inputs.sum(1, keepdim=True))
    assert flat.accuracy.tolist() == [1.0, 1.0]


def test_unknown_target_raises():
    fn = _ensemble([torch.randn(4, 3)])
    x, y = torch.rand(5, 4), torch.tensor([0, 1, 2, 0, 1])
    with pytest.raises(ValueError, match="target"):
        fgsm_attack(fn, x, y, 0.1, target="least-likely")
    with pytest.raises(ValueError, match="target"):
        fgsm_accuracy(fn, x, y, [0.1], target="least-likely")
