"""Where the real datasets live."""

import os
from pathlib import Path
from typing import Optional, Union

ENV_VAR = "PYROZOO_DATA_DIR"


def default_data_dir() -> Path:
    """The data root: ``$PYROZOO_DATA_DIR`` if set, else the nearest ``shared/data`` found
    beside the working directory or the package's checkout (walking up the parents)."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    tried = []
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        for parent in (start, *start.parents):
            candidate = parent / "shared" / "data"
            tried.append(candidate)
            if candidate.is_dir():
                return candidate
    raise FileNotFoundError(
        f"no data directory found: set ${ENV_VAR} or pass --data-dir (looked for shared/data beside "
        f"{Path.cwd()} and the pyrozoo package and their parents)"
    )


def resolve_data_dir(data_dir: Optional[Union[str, Path]]) -> Path:
    path = Path(data_dir) if data_dir is not None else default_data_dir()
    if not path.is_dir():
        raise FileNotFoundError(f"data directory {path} does not exist")
    return path
