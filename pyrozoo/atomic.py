"""Atomic file writes: a file is either its old self or complete, never half-written.

Every writer here writes a temporary file beside the target, flushes it to disk and
renames it over the target (``os.replace`` is atomic on POSIX and Windows). A failure
(a full disk, a killed process, an exception in the caller's code) leaves the previous
file as it was and raises an ``OSError`` that names the file that could not be written.
"""

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Union

PathLike = Union[str, Path]


@contextmanager
def atomic_path(path: PathLike) -> Iterator[Path]:
    """Yields a temporary path to write; on leaving the block it replaces ``path``.

    On an exception the temporary file is removed and ``path`` is left untouched; an
    ``OSError`` from the write is re-raised with ``path`` in its message."""
    path = Path(path)
    # the process id keeps two writers (e.g. parallel lanes) from sharing a temporary file
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise OSError(e.errno, f"could not write {path} ({e.strerror or e}); the previous version, if any, is unchanged") from e
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path: PathLike, text: str) -> Path:
    """Writes ``text`` to ``path`` atomically; returns ``path``."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_json(path: PathLike, obj, **kwargs) -> Path:
    """Writes ``obj`` as JSON (``json.dumps(obj, **kwargs)``, indent 1 by default) to
    ``path`` atomically; returns ``path``."""
    kwargs.setdefault("indent", 1)
    return write_text(path, json.dumps(obj, **kwargs))


def write_csv(df, path: PathLike, **kwargs) -> Path:
    """``df.to_csv(path, index=False, **kwargs)``, atomically."""
    kwargs.setdefault("index", False)
    with atomic_path(path) as tmp:
        df.to_csv(tmp, **kwargs)
    return Path(path)


def save_figure(fig, path: PathLike, **kwargs) -> Path:
    """``fig.savefig(path, **kwargs)``, atomically (the format is taken from ``path``'s suffix)."""
    path = Path(path)
    kwargs.setdefault("format", path.suffix.lstrip(".") or "png")
    with atomic_path(path) as tmp:
        fig.savefig(tmp, **kwargs)
    return path
