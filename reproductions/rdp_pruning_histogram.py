"""Histograms of RDP's per-unit pruning statistic with the thresholds (Oh et al. 2020, Fig. 7).

For every double-grouped layer of a radial-directional LeNet, the log posterior mode of the
local radius of each row (output unit / channel, top) and column (input unit / channel,
bottom), with the pruning threshold as a red dotted line and the kept fraction in the title.

The statistics come from a JSON written by the ``rdp`` compression method
(``reproductions/compress_lenet.py --method rdp --extra '{"statistics_out": "<file>"}'``), so the
figure belongs to that run; without ``--statistics`` this script trains one itself (``--epochs``,
``--arch``; ``--quick`` for a smoke run on a subset).

    python reproductions/rdp_pruning_histogram.py --statistics docs/results/rdp_lenet5_e200_pruning_statistics.json --stem rdp_lenet5_e200_pruning_histogram
    python reproductions/rdp_pruning_histogram.py --quick --results-dir /tmp/out
    python reproductions/rdp_pruning_histogram.py --data digits.npz --arch lenet300 --epochs 50

``--data`` trains on a user's images instead of MNIST (an ``.npz`` with ``x``, ``y``, optionally
``x_test``, ``y_test``): ``lenet300`` reads them flattened whatever their shape, ``lenet5`` is
built for MNIST's 1 x 28 x 28 and stops before any work on another shape; the figure is named
after the data set (``rdp_<name>_<arch>_pruning_histogram``).
"""

import argparse
import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from pyrozoo.reporting import save_figure  # noqa: E402
from zoo_protocols.cli import add_common_arguments, add_image_data_arguments, device_from_args, existing_file, image_data, positive_int, run_main  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--statistics", type=existing_file, default=None, help="JSON written by the rdp compression method's statistics_out")
    parser.add_argument("--arch", default="lenet5", choices=("lenet5", "lenet300"), help="architecture when training here")
    parser.add_argument("--epochs", type=positive_int, default=None, help="training epochs when training here")
    parser.add_argument("--stem", default=None, help="file stem of the figure (default: rdp_<arch>_pruning_histogram)")
    add_common_arguments(parser)
    add_image_data_arguments(parser)
    args = parser.parse_args(argv)
    if args.data is not None and args.statistics is not None:
        parser.error("--statistics holds a finished run's figures and --data asks for a new run: give one of them")
    return args


def train_and_collect(args, path: Path, own=None) -> dict:
    """Runs the registered ``rdp`` compression method once, writing its statistics to ``path``;
    on ``own`` (a user's :class:`~pyrozoo.data.ClassificationSplit`) instead of MNIST if given."""
    from pyrozoo.data import load_mnist
    from pyrozoo.utils import set_seed
    from zoo_protocols.config import RunConfig
    from zoo_protocols.lenet import available_methods

    set_seed(args.seed)
    extra = {"statistics_out": str(path)}
    if own is not None:
        train, test = (own.x_train, own.y_train), (own.x_test, own.y_test)
        extra.update(input_shape=own.input_shape, num_classes=own.num_classes)  # zoo_protocols.lenet_recipes.network_for
    else:
        train = load_mnist("mnist", train=True, data_dir=args.data_dir)
        test = load_mnist("mnist", train=False, data_dir=args.data_dir)
    if args.quick:
        train, test = (train[0][:1000], train[1][:1000]), (test[0][:500], test[1][:500])
        extra["predictive_samples"] = 0
    config = RunConfig(arch=args.arch, epochs=args.epochs, device=device_from_args(args), seed=args.seed, quick=args.quick, progress=not args.no_progress, extra=extra)
    available_methods()["rdp"].run(train, test, config)
    return read_statistics(path)


def read_statistics(path: Path) -> dict:
    """The JSON of the rdp method's ``statistics_out``; a file cut short or of another kind is an error naming it."""
    try:
        record = json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not a complete statistics JSON ({e})") from None
    if not isinstance(record, dict) or not isinstance(record.get("groupings"), dict):
        raise ValueError(f"{path} holds no 'groupings': not a statistics file of the rdp method")
    return record


def plot(record: dict, dataset: str = None):
    """The figure: one column per layer, rows of the layer on top, columns below (``dataset``:
    named in the title when not MNIST)."""
    groupings = record["groupings"]
    layers = list(dict.fromkeys(key.rsplit(".", 1)[0] for key in groupings))
    fig, axes = plt.subplots(2, len(layers), figsize=(3.2 * len(layers), 5.2), squeeze=False)
    for j, layer in enumerate(layers):
        for i, kind in enumerate(("row", "column")):
            ax = axes[i, j]
            entry = groupings.get(f"{layer}.{kind}")
            if entry is None:
                ax.axis("off")
                continue
            values = np.asarray(entry["values"], dtype=float)
            threshold = entry["threshold"]
            ax.hist(values, bins=min(60, max(10, values.size // 4)), color="0.35")
            if threshold is not None and math.isfinite(threshold):
                ax.axvline(threshold, color="red", linestyle=":", linewidth=1.5)
            ax.set_title(f"{layer} {kind}s: {entry['kept']}/{values.size} kept", fontsize=9)
            ax.set_xlabel("log mode of the local radius", fontsize=8)
            if j == 0:
                ax.set_ylabel("number of " + kind + "s", fontsize=8)
            ax.tick_params(labelsize=7)
    fig.suptitle(f"RDP pruning statistic, {record.get('arch', '')}{f' on {dataset}' if dataset else ''} (test error {record.get('test_error', float('nan')):.2f}%, architecture {record.get('pruned_architecture', '?')})", fontsize=10)
    fig.tight_layout()
    return fig


def main(argv=None):
    args = parse_args(argv)
    # a user's images, read and checked before any work
    own = image_data(args, bundled=("mnist",))
    if own is not None:
        from zoo_protocols.lenet_recipes import check_network_input

        check_network_input(own, args.arch)
    stem = args.stem or ("rdp" + ("" if own is None else f"_{own.dataset}") + f"_{args.arch}_pruning_histogram")
    if args.statistics is not None:
        record = read_statistics(args.statistics)
    else:
        record = train_and_collect(args, Path(args.results_dir) / f"{stem}_statistics.json", own)
    path = save_figure(plot(record, None if own is None else own.dataset), stem, args.results_dir)
    print(f"wrote {path}")
    return path


if __name__ == "__main__":
    run_main(main)
