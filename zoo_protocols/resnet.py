"""ResNet-20 on CIFAR-10 compressed with SG-MCMC-SA, magnitude pruning and simulated annealing
(Deng et al. 2019, Sec. 5.4, Table 3): the protocol's stages and methods, evaluated from their
declarations (:mod:`zoo_protocols.methods`): ``a-sghmc`` is ``sghmc-ssgl`` annealed, ``a-sghmc-em``
``sghmc-em`` annealed, ``sghmc-sa`` / ``a-sghmc-sa`` ``sghmc-sa`` without / with annealing.
``reproductions/resnet_compression.py`` runs them; its docstring describes the settings.

The stages read ``args.num_classes`` (the network's outputs) and ``args.normalisation``
(per-channel ``(mean, std)`` the images are standardised with: CIFAR-10's, or a user's
images' own), so that they run on any 3 x 32 x 32 images.
"""

import torch

from pyrozoo import atomic, metrics
from pyrozoo.data import TensorBatches
from pyrozoo.data.cifar import MEAN, STD
from pyrozoo.inference.pruning import MagnitudePruning, layer_sparsity_for_overall, sparsity_of
from pyrozoo.inference.sgmcmc import model_output
from pyrozoo.inference.step_sizes import Geometric, PiecewiseConstant
from pyrozoo.models import BayesianNeuralNetwork, CategoricalLikelihood, ResNet20
from pyrozoo.serialization import load_state, save_state
from pyrozoo.utils import set_seed
from zoo_protocols.config import RunConfig
from zoo_protocols.methods import method as declaration

#: this protocol's methods: name -> (the declaration it evaluates, annealed)
DECLARATIONS = {"a-sghmc": ("sghmc-ssgl", True), "a-sghmc-em": ("sghmc-em", True), "sghmc-sa": ("sghmc-sa", False), "a-sghmc-sa": ("sghmc-sa", True)}
METHODS = tuple(DECLARATIONS)
#: Table 3: (v0, v1) by target sparsity
PRIOR_BY_SPARSITY = {0.3: (0.5, 1e-3), 0.5: (0.1, 5e-4), 0.7: (0.1, 5e-5), 0.9: (0.005, 1e-5)}
#: Deng et al. (2019), Table 3 (accuracy %, best point estimate over epochs)
PUBLISHED = {
    "a-sghmc": {0.3: 94.07, 0.5: 94.16, 0.7: 93.16, 0.9: 90.59},
    "a-sghmc-em": {0.3: 94.18, 0.5: 94.19, 0.7: 93.41, 0.9: 91.26},
    "sghmc-sa": {0.3: 94.13, 0.5: 94.11, 0.7: 93.52, 0.9: 91.45},
    "a-sghmc-sa": {0.3: 94.23, 0.5: 94.27, 0.7: 93.74, 0.9: 91.68},
}


def channel_statistics(x):
    """Per-channel ``(mean, std)`` of images ``x`` ``(n, 3, H, W)``, as tuples of floats (the
    normalisation of a user's images, in place of CIFAR-10's :data:`MEAN`, :data:`STD`)."""
    flat = x.transpose(0, 1).flatten(1).double()
    return tuple(flat.mean(1).tolist()), tuple(flat.std(1).clamp_min(1e-12).tolist())


class AugmentedBatches(TensorBatches):
    """:class:`~pyrozoo.data.TensorBatches` of raw images that yields randomly cropped (zero
    padding 4) and flipped batches, standardised per channel by ``normalisation`` (``(mean,
    std)``, CIFAR-10's by default); the crop and flip draws use the batches' own generator, so
    checkpoints resume them."""

    def __init__(self, *tensors, normalisation=(MEAN, STD), **kwargs):
        super().__init__(*tensors, **kwargs)
        self.normalisation = normalisation

    def __iter__(self):
        mean = torch.tensor(self.normalisation[0], device=self.tensors[0].device).reshape(1, 3, 1, 1)
        std = torch.tensor(self.normalisation[1], device=self.tensors[0].device).reshape(1, 3, 1, 1)
        for x, y, idx in super().__iter__():
            n = len(x)
            offsets = torch.randint(0, 9, (2, n), generator=self.generator).to(x.device)
            flip = (torch.rand(n, generator=self.generator) < 0.5).to(x.device)
            padded = torch.nn.functional.pad(x, (4, 4, 4, 4))
            rows = (offsets[0][:, None] + torch.arange(32, device=x.device))[:, None, :, None]
            cols = (offsets[1][:, None] + torch.arange(32, device=x.device))[:, None, None, :]
            batch = torch.arange(n, device=x.device)[:, None, None, None]
            channels = torch.arange(3, device=x.device)[None, :, None, None]
            crops = padded[batch, channels, rows, cols]
            crops = torch.where(flip[:, None, None, None], crops.flip(-1), crops)
            yield (crops - mean) / std, y, idx


def normalise(x, normalisation=(MEAN, STD)):
    mean = torch.tensor(normalisation[0], device=x.device).reshape(1, 3, 1, 1)
    std = torch.tensor(normalisation[1], device=x.device).reshape(1, 3, 1, 1)
    return (x - mean) / std


def accuracy(model, values, x_test, y_test, chunk=1000, normalisation=(MEAN, STD)):
    model.net.eval()
    probs = torch.cat([model_output(model, values, part).softmax(-1) for part in normalise(x_test, normalisation).split(chunk)])
    model.net.train()
    return 100.0 * metrics.accuracy(probs, y_test)


def lr_schedule(lr, epochs, steps_per_epoch):
    return PiecewiseConstant(lr, [int(0.7 * epochs * steps_per_epoch) + 1, int(0.9 * epochs * steps_per_epoch) + 1], 0.1)


def pretrain(data, args, device, run_dir):
    """Stage 1: the dense network (saved as ``pretrained.pt`` and reused)."""
    path = run_dir / "pretrained.pt"
    if path.exists():
        return load_state(path, map_location=device)
    x, y, x_test, y_test = data
    set_seed(args.seed)
    spec = declaration("sghmc")
    s = RunConfig().settings({"prior_scale": args.gaussian_scale, "momentum": 0.9}, spec.defaults)
    net = ResNet20(num_classes=args.num_classes).to(device)
    model = BayesianNeuralNetwork(net, spec.prior(s), CategoricalLikelihood(len(x)))
    batches = AugmentedBatches(x, y, batch_size=args.batch_size, seed=args.seed, normalisation=args.normalisation)
    sampler = spec.sampler(model, s, lr_schedule(args.pretrain_lr, args.pretrain_epochs, len(batches)), inverse_temperature=args.pretrain_tau)
    sampler.run(batches, epochs=args.pretrain_epochs, seed=args.seed, checkpoint=run_dir / "pretrain_checkpoint.pt", progress=not args.no_progress)
    state = {"values": sampler.values(), "buffers": {k: v.clone() for k, v in net.named_buffers()}}
    print(f"pretrained dense ResNet-20: test accuracy {accuracy(model, state['values'], x_test, y_test, normalisation=args.normalisation):.2f}%", flush=True)
    save_state(state, path)
    return state


def protocol_settings(args, sparse) -> dict:
    """Table 3's SSGL settings (over the declarations'): (v0, v1) by target sparsity, the residual
    blocks' 3x3 convolutions sparse, nu = lambda = 1000, a = b = 2.7e5, kappa_0 = kappa_1 = 5e-4,
    omega_k = 0.02 (1000 + k)^(-3/4)."""
    v0, v1 = PRIOR_BY_SPARSITY.get(args.sparsity, PRIOR_BY_SPARSITY[0.9])
    return {
        "v0": v0, "v1": v1, "sparse": {"expose_parameters": sparse}, "bias_scale": args.gaussian_scale, "nu": 1000.0, "lam": 1000.0,
        "a": 2.7e5, "b": 2.7e5, "sigma": 1.0, "kappa0": 5e-4, "kappa1": 5e-4, "update_delta": True, "omega": (0.02, 0.75, 1000.0), "momentum": 0.9,
    }


def finetune(method, pretrained, data, args, device, run_dir):
    """Stage 2: sparse fine-tuning with the SSGL prior, pruning and (optionally) annealing."""
    x, y, x_test, y_test = data
    set_seed(args.seed)
    net = ResNet20(num_classes=args.num_classes).to(device)
    with torch.no_grad():
        for name, p in net.named_parameters():
            p.copy_(pretrained["values"][name])
        for name, b in net.named_buffers():
            b.copy_(pretrained["buffers"][name])
    name, annealed = DECLARATIONS[method]
    spec = declaration(name)
    sparse = [n for n, _ in net.named_parameters() if "conv" in n and n != "conv1.weight"]
    s = RunConfig().settings(protocol_settings(args, sparse), spec.defaults)
    model = BayesianNeuralNetwork(net, spec.prior(s), CategoricalLikelihood(len(x)))
    adaptations = spec.adaptations(model, s)
    batches = AugmentedBatches(x, y, batch_size=args.batch_size, seed=args.seed, normalisation=args.normalisation)
    steps_per_epoch = len(batches)
    total = sum(p.numel() for p in net.parameters())
    pruned = sum(p.numel() for n, p in net.named_parameters() if n in sparse)
    pruning = MagnitudePruning(sparse, layer_sparsity_for_overall(args.sparsity, total, pruned), decay=0.99, period=50.0)
    tau = Geometric(args.tau, 1.005, every=steps_per_epoch) if annealed else args.tau
    sampler = spec.sampler(model, s, lr_schedule(args.lr, args.epochs, steps_per_epoch), inverse_temperature=tau, adaptations=adaptations + [pruning])
    history = sampler.run(batches, epochs=args.epochs, seed=args.seed, checkpoint=run_dir / f"{method}_checkpoint.pt", progress=not args.no_progress)
    atomic.write_csv(history, run_dir / f"{method}_history.csv")
    values = sampler.values()
    return {"accuracy": accuracy(model, values, x_test, y_test, normalisation=args.normalisation), "sparsity": sparsity_of(values), "sigma": float(model.prior.state.sigma)}
