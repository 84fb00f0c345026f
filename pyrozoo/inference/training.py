"""``fit``: stochastic variational inference with minibatches, schedules and checkpoints."""

import math
import time
import warnings
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

import pandas as pd
import pyro
import torch
from pyro import poutine
from pyro.infer.elbo import ELBO

from pyrozoo.data.batching import TensorBatches
from pyrozoo.distributed import resolve as resolve_parallel
from pyrozoo.inference.diagnostics import CHECK_EXAMPLES, RunMonitor, all_finite, posterior_check, with_events
from pyrozoo.inference.calling import batches_of
from pyrozoo.inference.elbo import ClosedFormKL_ELBO
from pyrozoo.inference.loop import EpochLoop
from pyrozoo.inference.prediction import check_training_labels
from pyrozoo.inference.schedules import KLSchedule
from pyrozoo.models.dropout_priors import KLWarmupWarning
from pyrozoo.poutine import flipout, latent_scale, local_reparameterization, weights_per_example
from pyrozoo.utils import resolve_device, rng_states_kept, set_seed

ESTIMATORS = {"local": local_reparameterization, "flipout": flipout, "per-example": weights_per_example, None: None, "none": None}


def default_optimizer(params, lr: float = 1e-3):
    """``torch.optim.Adam`` over all parameters (or parameter groups, whose own ``lr`` wins),
    fused into one kernel where torch supports it."""
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.Adam(params, lr=lr)


def collect_parameters(model, guide, objective: ELBO, args) -> list:
    """Every parameter the objective depends on: the modules' own parameters and whatever
    ``pyro.param`` statements the model and guide make (captured as ``SVI`` does)."""
    params = {}
    for module in (model, guide):
        if isinstance(module, torch.nn.Module):
            for p in module.parameters():
                if p.requires_grad:
                    params[id(p)] = p
    with poutine.trace(param_only=True) as capture:
        with poutine.block(hide_types=["sample"]):
            objective.differentiable_loss(model, guide, *args)
    for site in capture.trace.nodes.values():
        p = site["value"].unconstrained()
        if p.requires_grad:
            params[id(p)] = p
    return list(params.values())


def training_step(model, guide, objective: ELBO, optimizer: torch.optim.Optimizer, batch: tuple, *, kl_scale: float = 1.0, estimator: Optional[str] = None,
                  params: Optional[list] = None, max_grad_norm: Optional[float] = None, parallel=None) -> torch.Tensor:
    """One optimisation step of :func:`fit` on ``batch``; returns the (detached) loss.

    :param kl_scale: weight of the latent (KL) part, applied with :func:`~pyrozoo.poutine.latent_scale`.
    :param estimator: ``"local"``, ``"flipout"`` or ``None`` (handler around the objective).
    :param parallel: a :class:`~pyrozoo.distributed.DataParallel`: ``batch`` is this rank's
        part, and the gradients of ``params`` are averaged over the ranks before clipping.
    """
    handler = ESTIMATORS[estimator]
    with ExitStack() as stack:
        if kl_scale != 1.0:
            stack.enter_context(latent_scale(kl_scale))
        if handler is not None:
            stack.enter_context(handler())
        loss = objective.differentiable_loss(model, guide, *batch)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if parallel is not None:
        parallel.average_gradients(params, len(batch[0]))
    if max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    optimizer.step()
    return loss.detach()


def fit(
    model,
    guide,
    data: Union[Sequence[torch.Tensor], TensorBatches],
    *,
    epochs: int,
    objective: Optional[ELBO] = None,
    batch_size: Optional[int] = 128,
    lr: float = 1e-3,
    optimizer: Optional[Callable[[list], torch.optim.Optimizer]] = None,
    lr_schedule: Optional[Callable[[int], float]] = None,
    kl_schedule: Optional[KLSchedule] = None,
    estimator: Optional[str] = None,
    device: Union[str, torch.device, None] = None,
    seed: Optional[int] = None,
    checkpoint: Union[str, Path, None] = None,
    checkpoint_every: int = 1,
    resume: bool = True,
    progress: bool = True,
    callback: Optional[Callable[[int, dict], Optional[bool]]] = None,
    max_grad_norm: Optional[float] = None,
    distributed=None,
) -> pd.DataFrame:
    """Trains ``guide`` (and the model's point-estimate parameters) by maximising an ELBO.

    One step: draw a minibatch ``(x, y, idx)``, evaluate ``objective.differentiable_loss(
    model, guide, x, y, idx)`` under the KL weight of ``kl_schedule`` and the chosen
    gradient estimator, back-propagate, step one optimizer over all parameters. The loss
    stays on the device; it is read once per epoch (no per-step host synchronisation).

    :param model: any Pyro model, written as Pyro documents it (:mod:`pyrozoo.inference.calling`):
        ``model(x, y)`` with ``pyro.plate("data", len(x))`` (minibatched, its data plate scaled
        by ``N / B``), ``model(x, y)`` with ``pyro.plate("data", len(x), subsample_size=B)``
        (given all the data, it subsamples itself), or ``model(x, y, subsample=idx)`` (given
        the minibatch and its indices, as :class:`~pyrozoo.models.BayesianNeuralNetwork`).
    :param guide: a guide with the same signature.
    :param data: ``(x, y)`` tensors, or a :class:`~pyrozoo.data.TensorBatches`.
    :param int epochs: total number of epochs (including those done before a resume).
    :param objective: the ELBO (default :class:`ClosedFormKL_ELBO`).
    :param int batch_size: minibatch size when ``data`` are tensors (``None``: all the data at
        each step; a model that subsamples itself uses its own ``subsample_size``).
    :param float lr: learning rate of the default optimizer.
    :param optimizer: ``params -> torch.optim.Optimizer`` (default: fused Adam).
    :param lr_schedule: ``epoch -> multiplier`` of the initial learning rate.
    :param kl_schedule: a :class:`~pyrozoo.inference.schedules.KLSchedule`.
    :param str estimator: ``"local"`` (local reparameterization), ``"flipout"`` or ``None``; an
        objective that declares ``accepted_estimators`` (the importance-weighted ones: ``None``
        only) refuses any other before training starts.
    :param device: where to train (default: where the model is; for a model without parameters, where the data are).
    :param int seed: seeds Pyro, torch, numpy, random and the batch order.
    :param checkpoint: file for periodic checkpoints (model, guide, param store, optimizer,
        history, random states); with ``resume=True`` an existing one is continued from.
        An interrupt (Ctrl-C) saves a checkpoint before re-raising.
    :param int checkpoint_every: epochs between checkpoints.
    :param bool progress: show a progress bar.
    :param callback: ``f(epoch, row) -> stop?`` after every epoch; ``row`` is the history row.
    :param float max_grad_norm: clip the global gradient norm.
    :param distributed: several processes (:func:`pyrozoo.distributed.resolve`): by default
        data-parallel when a process group of more than one process is initialised (global
        batch ``batch_size`` split over the ranks, averaged gradients, the steps of the
        one-process run; rank 0 writes the checkpoint), ``False`` for one process regardless.
    :returns: the training history as a ``DataFrame`` (``epoch, loss, kl_scale, lr, seconds``,
        plus the objective's ``diagnostics`` of each epoch's last step where it records them,
        e.g. ``ess`` for the importance-weighted objectives, and ``ess_mean``, the mean ESS
        over the epoch's steps), with ``attrs["events"]`` and ``attrs["status"]``: what went
        wrong at run time (:mod:`pyrozoo.inference.diagnostics`). A diverging loss or
        predictions (:class:`~pyrozoo.inference.diagnostics.DivergenceWarning`), collapsed
        importance weights (``WeightCollapseWarning``) and, checked after the last epoch on up
        to 2048 training examples, a posterior collapsed onto the prior at chance
        (``PriorCollapseWarning``) warn; a non-finite loss or parameter raises
        :class:`~pyrozoo.inference.diagnostics.DivergenceError`.
    """
    if not isinstance(epochs, int) or epochs < 0:
        raise ValueError(f"epochs must be a non-negative int, got {epochs!r}")
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of 'local', 'flipout', 'per-example' or None, got {estimator!r}")
    if checkpoint_every < 1:
        raise ValueError("checkpoint_every must be >= 1")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < math.inf:
        raise ValueError(f"lr must be a finite number > 0, got {lr!r}")
    objective = objective if objective is not None else ClosedFormKL_ELBO()
    # an objective may declare the estimators it can be evaluated under (e.g. importance weights
    # need one global weight draw per particle); fit knows no objective classes
    accepted = getattr(objective, "accepted_estimators", None)
    if accepted is not None and ESTIMATORS[estimator] not in {ESTIMATORS[a] for a in accepted}:
        names = " or ".join(repr(a) for a in accepted)
        raise ValueError(
            f"{type(objective).__name__} cannot be trained with estimator={estimator!r}: it accepts estimator={names} "
            f"(pass estimator={accepted[0]!r}{', the default' if accepted[0] is None else ''}). The 'local', 'flipout' and "
            "'per-example' estimators draw weights per example, which that objective does not allow"
        )
    parallel = resolve_parallel(distributed)
    first_tensor = data.tensors[0] if isinstance(data, TensorBatches) else (data[0] if isinstance(data, (tuple, list)) and data else None)
    device = resolve_device(device, model, like=first_tensor)
    if seed is not None:
        set_seed(seed)

    if isinstance(model, torch.nn.Module):
        model.to(device)  # before the model is first called: the probe of its convention runs on the device
    call, batches = batches_of(model, data, batch_size, seed, device=device)
    if parallel is not None:
        if call.kind != "subsample":
            raise ValueError(f"distributed training splits each minibatch over the ranks by its indices, which a model called as {call.kind!r} "
                             "does not take: write it as model(x, y, subsample=idx) with pyro.plate('data', N, subsample=idx)")
        batches = parallel.batches(batches)  # this rank's part of every global batch; n stays global
    batches.to(device)
    call.data = tuple(batches.tensors[:2])
    likelihood = getattr(model, "likelihood", None)
    if likelihood is not None and likelihood.dataset_size is None:
        likelihood.dataset_size = batches.n

    first = next(iter(TensorBatches(*batches.tensors, batch_size=batches.batch_size, shuffle=False)))
    if getattr(guide, "prototype_trace", True) is None:
        with poutine.block():
            guide(*call.args(first))  # creates the guide's parameters from a trace of the model
    if isinstance(guide, torch.nn.Module):
        guide.to(device)
    check_training_labels(model, *batches.tensors[:2])
    loop = EpochLoop(
        batches,
        epochs=epochs,
        state=lambda: checkpoint_state(model, guide, opt),
        checkpoint=checkpoint,
        checkpoint_every=checkpoint_every,
        resume=resume,
        progress=progress,
        desc="fit",
        monitor="loss",
        hint="lower the learning rate, clip gradients (max_grad_norm) or check the data and the prior's hyperparameters",
        callback=callback,
        snapshot_on_interrupt=True,  # never the half-updated parameters of an interrupted epoch
        parallel=parallel,
        watch=RunMonitor(
            energy="loss", group="kl_scale", num_particles=getattr(objective, "num_particles", None), readings_per_row=len(batches), name="fit",
            hint="lower the learning rate, clip gradients (max_grad_norm) or check the data and the prior's hyperparameters",
        ),
    )
    saved = loop.load(map_location=device)
    if saved is not None:
        _load_modules(saved, model, guide)
    with call.handler(first):
        params = collect_parameters(model, guide, objective, call.args(first))
    opt = (optimizer or (lambda p: default_optimizer(p, lr)))(params)
    base_lrs = [group["lr"] for group in opt.param_groups]
    if saved is not None:
        opt.load_state_dict(saved["optimizer"])
    if parallel is not None:
        parallel.synchronise_parameters(params)
    loop.restore()
    num_batches = len(batches)

    def one_epoch(epoch):
        if lr_schedule is not None:
            factor = float(lr_schedule(epoch))
            for group, base in zip(opt.param_groups, base_lrs):
                group["lr"] = base * factor
        t0 = time.perf_counter()
        total = torch.zeros((), device=device)
        kl_scale = 1.0
        ess = None  # the objective's ESS summed over the epoch's steps (on the device)
        figures = {}
        for b, batch in enumerate(batches):
            kl_scale = kl_schedule(epoch, b, num_batches) if kl_schedule is not None else 1.0
            with call.handler(batch):
                loss = training_step(model, guide, objective, opt, call.args(batch), kl_scale=kl_scale, estimator=estimator, params=params, max_grad_norm=max_grad_norm, parallel=parallel)
            total += loss
            if epoch == 0 and b == 0:  # the divergence rule's earliest loss
                figures.update(initial_energy=loss, initial_group=kl_scale)
            step_ess = getattr(objective, "diagnostics", {}).get("ess")
            if step_ess is not None:
                ess = step_ess if ess is None else ess + step_ess
        row = {"epoch": epoch + 1, "loss": total.item() / num_batches, "kl_scale": kl_scale, "lr": opt.param_groups[0]["lr"], "seconds": time.perf_counter() - t0}
        # objectives that record diagnostics (e.g. the importance-weighted ones' ESS): last step's values
        row.update({k: float(v) for k, v in getattr(objective, "diagnostics", {}).items()})
        if ess is not None:
            row["ess_mean"] = float(ess) / num_batches
        figures["parameters_finite"] = all_finite(params)
        return loop.record(row, where=f"in epoch {epoch}", figures=figures, step=(epoch + 1) * num_batches)

    with warnings.catch_warnings():
        if loop.start_epoch > 0:
            # the dropout priors' warm-up watch is about a run's first steps, which a resumed run
            # took in its earlier leg: at full weight now by its schedule, the warning would be false
            warnings.simplefilter("ignore", KLWarmupWarning)
        history = loop.run(one_epoch)
    if history:
        # rule 3 (and 1c) on the fitted guide, without moving any random stream the caller relies on
        check = TensorBatches(*batches.tensors, batch_size=min(batches.n, CHECK_EXAMPLES), shuffle=False)
        with rng_states_kept():
            try:
                figures = posterior_check(model, guide, call.args(next(iter(check))))
            except Exception as e:  # noqa: BLE001 - a check that cannot run must not lose the fitted run
                figures = {"skipped": f"{type(e).__name__}: {e}"}
        loop.watch.check_final(history, figures, epoch=history[-1]["epoch"], step=history[-1]["epoch"] * num_batches)
    columns = ["epoch", "loss", "kl_scale", "lr", "seconds"]
    return with_events(pd.DataFrame(history, columns=columns + [k for k in (history[-1] if history else {}) if k not in columns]), loop.events)


def _module_param_ids(*modules) -> set:
    return {id(p) for m in modules if isinstance(m, torch.nn.Module) for p in m.parameters()}


def _store_state_without(module_ids: set) -> dict:
    """The param store's entries that are not parameters of the model or guide modules
    (those travel in the modules' state dicts; saving them twice would, on load, leave the
    store holding copies that the modules no longer use)."""
    state = pyro.get_param_store().get_state()
    keep = {k for k, v in state["params"].items() if id(v) not in module_ids}
    return {"params": {k: state["params"][k] for k in keep}, "constraints": {k: state["constraints"][k] for k in keep}}


def checkpoint_state(model, guide, opt) -> dict:
    """What :func:`fit` checkpoints of a run (the loop adds epoch, history, batch order and random
    states): the modules' state dicts, the rest of the param store, the optimizer's state."""
    return {
        "model": model.state_dict() if isinstance(model, torch.nn.Module) else None,
        "guide": guide.state_dict() if isinstance(guide, torch.nn.Module) else None,
        "param_store": _store_state_without(_module_param_ids(model, guide)),
        "optimizer": opt.state_dict(),
    }


def _load_modules(state, model, guide) -> None:
    if state.get("model") is not None:
        model.load_state_dict(state["model"])
    if state.get("guide") is not None:
        guide.load_state_dict(state["guide"])
    pyro.get_param_store().set_state(state["param_store"])
