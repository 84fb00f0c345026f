"""Dynamically binarised images (the VAE protocol of :mod:`zoo_protocols.vae_priors`): every time an
image is drawn it is a fresh ``Bernoulli(x)`` sample of its grey levels ``x``, the usual
treatment of MNIST for VAEs with a Bernoulli decoder."""

import torch

from pyrozoo.data import TensorBatches


def random_binarize(x):
    """One ``Bernoulli(x)`` draw of grey levels ``x`` in [0, 1] (torch's global generator)."""
    return (torch.rand_like(x) < x).to(x.dtype)


class DynamicallyBinarized(TensorBatches):
    """Minibatches of ``Bernoulli(x)`` images, redrawn every epoch from the grey levels ``x``.

    The tensors the base class holds are one fixed binarisation (what ``fit`` uses to set
    up parameters); the iterator draws fresh ones from its own saveable generator.
    """

    def __init__(self, probs, y, *, batch_size, seed=0):
        g = torch.Generator().manual_seed(seed + 1)
        super().__init__((torch.rand(probs.shape, generator=g) < probs).to(probs.dtype), y, batch_size=batch_size, seed=seed)
        self.probs = probs
        self.binarizer = torch.Generator().manual_seed(seed + 2)

    def __iter__(self):
        for x, y, idx in super().__iter__():
            u = torch.rand(x.shape, generator=self.binarizer).to(x.device)
            yield (u < self.probs[idx]).to(x.dtype), y, idx

    def to(self, device):
        super().to(device)
        self.probs = self.probs.to(device)
        return self

    def state_dict(self):
        return {**super().state_dict(), "binarizer": self.binarizer.get_state()}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.binarizer.set_state(state["binarizer"])
