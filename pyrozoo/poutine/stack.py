"""The effect handlers active around a call: the one place that reads Pyro's handler stack.

Why this is needed at all: an objective that evaluates a model and guide *directly*
(plain method calls, see :mod:`pyrozoo.inference.direct`) never calls ``pyro.sample``, so
no handler sees its sites. That is right only when the objective knows every active handler
and applies its effect itself (pyrozoo's :func:`~pyrozoo.poutine.latent_scale` and
weight-noise handlers); any other handler (``SVI``'s parameter capture, ``trace``,
``block``, ``condition``, ...) expects to see the sites, so the objective must then run
the model and guide under Pyro. Pyro has no public way to list the active handlers, so
this module reads its private ``pyro.poutine.runtime._PYRO_STACK``; nothing else in
pyrozoo may.
"""

from typing import NamedTuple, Optional, Union

import torch
from pyro.infer.autoguide.initialization import InitMessenger
from pyro.poutine.runtime import _PYRO_STACK

from pyrozoo.poutine.latent_scale_messenger import LatentScaleMessenger
from pyrozoo.poutine.weight_noise import WeightNoiseMessenger


class ActiveHandlers(NamedTuple):
    """What a direct evaluation needs to know about the handlers around a call."""

    #: how many handlers are active (0: the call is unhandled)
    count: int
    #: whether any active handler is neither a latent-scale nor a weight-noise handler
    foreign: bool
    #: the product of the active latent-scale handlers' scales, outermost first (1.0 when
    #: none), or ``None`` when a foreign handler is active (a direct evaluation does not apply)
    latent_scale: Union[float, torch.Tensor, None]
    #: the innermost active weight-noise handler (the one whose estimator Pyro would apply), or ``None``
    weight_noise: Optional[WeightNoiseMessenger]


_NONE = ActiveHandlers(0, False, 1.0, None)


def active_handlers() -> ActiveHandlers:
    """The effect handlers active at this point, as far as a direct evaluation cares (see the module docstring)."""
    if not _PYRO_STACK:
        return _NONE
    scales, weight_noise, foreign = [], None, False
    for messenger in _PYRO_STACK:  # outermost first
        if isinstance(messenger, LatentScaleMessenger):
            scales.append(messenger.scale)
        elif isinstance(messenger, WeightNoiseMessenger):
            weight_noise = messenger  # the innermost one wins, as in Pyro
        else:
            foreign = True
    scale = None
    if not foreign:
        scale = 1.0
        for s in scales:
            scale = scale * s
    return ActiveHandlers(len(_PYRO_STACK), foreign, scale, weight_noise)


def initialising() -> bool:
    """Whether a Pyro initialisation strategy is running (an ``InitMessenger`` is active): its
    ``sample()`` calls only learn a site's shape and a feasible point (e.g. ``Predictive``'s
    first trace), so a distribution that cannot be sampled may answer with a placeholder."""
    return any(isinstance(m, InitMessenger) for m in _PYRO_STACK)


def latent_weight() -> Optional[float]:
    """The KL weight of the evaluation in progress: the product of the active
    :func:`~pyrozoo.poutine.latent_scale` factors (1.0 when none), or ``None`` while an
    initialisation strategy runs (a trace at initial values, not a training evaluation)."""
    weight = 1.0
    for messenger in _PYRO_STACK:
        if isinstance(messenger, InitMessenger):
            return None
        if isinstance(messenger, LatentScaleMessenger):
            weight = weight * float(messenger.scale)
    return weight
