"""Where the example scripts, notebooks and recipes find the data: the repository's layout,
which the library (:mod:`pyrozoo.data.paths`) does not know.

The data root is, in order: a folder passed explicitly (``--data-dir``), ``$PYROZOO_DATA_DIR``,
else the nearest ``shared/data`` beside the working directory or this checkout (walking up
the parents). Recipes resolve it here and hand the library an explicit ``data_dir``.
"""

import os
from pathlib import Path
from typing import Optional, Union

from pyrozoo.data.paths import ENV_VAR


def default_data_dir() -> Path:
    """The data root when none is given: ``$PYROZOO_DATA_DIR`` if set, else the nearest
    ``shared/data`` found beside the working directory or the checkout holding
    :mod:`zoo_protocols` (walking up the parents).

    :raises FileNotFoundError: when there is neither.
    """
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        for parent in (start, *start.parents):
            candidate = parent / "shared" / "data"
            if candidate.is_dir():
                return candidate
    raise FileNotFoundError(
        f"no data directory found: set ${ENV_VAR} or pass --data-dir (looked for shared/data beside "
        f"{Path.cwd()} and the recipes package and their parents)"
    )


def resolve_data_dir(data_dir: Optional[Union[str, Path]] = None) -> Path:
    """``data_dir`` if given, else :func:`default_data_dir`; the folder must exist."""
    path = Path(data_dir) if data_dir is not None else default_data_dir()
    if not path.is_dir():
        raise FileNotFoundError(f"data directory {path} does not exist")
    return path
