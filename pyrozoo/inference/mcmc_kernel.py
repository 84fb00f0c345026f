"""An adapter that lets Pyro's ``MCMC`` / ``StreamingMCMC`` runner drive a
stochastic-gradient sampler, for small models (the runner keeps every sample and logs
every step; see ``shared/notes/sgmcmc-sa.md`` §6.1).

The runner calls ``setup(warmup_steps, *args)`` once with the full data set, so the kernel
owns the minibatch iterator; one ``sample`` call is ``thin`` stochastic-gradient steps.
Samples are constrained values, so ``transforms`` is empty and ``mcmc.get_samples()``
and ``Predictive(model, posterior_samples=...)`` work unchanged. The samplers in
:mod:`pyrozoo.inference.sgmcmc` do not depend on this module.
"""

from typing import Optional

import torch
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

from pyrozoo.data.batching import TensorBatches
from pyrozoo.inference.calling import batches_of
from pyrozoo.inference.sgmcmc import StochasticGradientMCMC


class SGMCMCKernel(MCMCKernel):
    """Pyro ``MCMCKernel`` around a :class:`~pyrozoo.inference.sgmcmc.StochasticGradientMCMC`.

    :param sampler: e.g. ``SGLD(model, lr=...)`` or ``SGHMC(model, ..., adaptations=[...])``.
    :param int batch_size: minibatch size of the data passed to ``MCMC.run(x, y)`` (``None``:
        all of it at each step; a model that subsamples itself takes its own size), called
        as :mod:`~pyrozoo.inference.calling` reads off the model.
    :param int thin: sampler steps per ``sample`` call.
    :param int seed: seed of the minibatch order.
    """

    def __init__(self, sampler: StochasticGradientMCMC, batch_size: int, thin: int = 1, seed: int = 0):
        if not isinstance(sampler, StochasticGradientMCMC):
            raise TypeError(f"sampler must be a StochasticGradientMCMC, got {type(sampler).__name__}")
        if not isinstance(thin, int) or thin < 1:
            raise ValueError(f"thin must be a positive int, got {thin!r}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.thin = thin
        self.seed = seed
        self._batches: Optional[TensorBatches] = None
        self._call = None
        self._iterator = None
        self._last = None

    @property
    def model(self):
        return self.sampler.model

    @property
    def transforms(self):
        return {}

    def setup(self, warmup_steps, *args, **kwargs):
        if kwargs:
            raise ValueError("SGMCMCKernel takes the data as positional arguments (x, y)")
        if len(args) != 2:
            raise ValueError(f"MCMC.run needs the data (x, y) for minibatching; got {len(args)} argument(s)")
        self._call, self._batches = batches_of(self.sampler.model, args, self.batch_size, self.seed, "SGMCMCKernel")
        self._iterator = self._cycle()
        self.sampler._start(self._call, self._batches)  # as StochasticGradientMCMC.run does

    def _cycle(self):
        while True:
            yield from self._batches

    @property
    def initial_params(self):
        self._last = self.sampler.values()
        return self._last

    @initial_params.setter
    def initial_params(self, params):
        self.sampler.init_values.update(params)

    def sample(self, params):
        # the runner hands back what the previous call returned; anything else is a restart
        if params is not self._last:
            with torch.no_grad():
                for name, value in params.items():
                    if not self.sampler.is_real(name):
                        raise ValueError(f"cannot restart constrained site {name!r} from the runner's values")
                    self.sampler.unconstrained(name).copy_(value)
        for _ in range(self.thin):
            self.sampler.step_on(self._call, next(self._iterator))
        self._last = self.sampler.values()
        return self._last

    def logging(self):
        k = max(self.sampler.num_steps, 1)
        return {"lr": f"{self.sampler.lr(k):.3g}", "tau": f"{self.sampler.inverse_temperature(k):.3g}"}

    def diagnostics(self):
        return {"num_steps": self.sampler.num_steps}
