"""Where the real datasets live: a folder the caller names, or ``$PYROZOO_DATA_DIR``.

The library knows no repository layout: it never searches for a data folder. Scripts that
want a default (the examples look for a ``shared/data`` beside the checkout) resolve one
themselves and pass it as ``data_dir``.
"""

import os
from pathlib import Path
from typing import Optional, Union

ENV_VAR = "PYROZOO_DATA_DIR"


def resolve_data_dir(data_dir: Optional[Union[str, Path]] = None) -> Path:
    """The data root: ``data_dir`` if given, else ``$PYROZOO_DATA_DIR``.

    :raises FileNotFoundError: when neither is set (saying to pass ``data_dir`` or set the
        variable), or the folder does not exist.
    """
    if data_dir is None:
        env = os.environ.get(ENV_VAR)
        if not env:
            raise FileNotFoundError(f"no data directory given: pass data_dir (the folder holding uci/, MNIST/raw/, ...) or set ${ENV_VAR}")
        data_dir = env
    path = Path(data_dir)
    if not path.is_dir():
        raise FileNotFoundError(f"data directory {path} does not exist")
    return path
