"""Read a few plain values (``global_step``, ``dp_world_size``...) out of a ``torch.save``
file without torch and without running any of its code.

Lightning's ``last.ckpt`` (copy mode) and DeepSpeed's ``*_model_states.pt`` say which step
they hold only inside their pickle. A ``torch.save`` file (torch >= 1.6) is a zip whose
``<archive>/data.pkl`` holds the object tree; tensors are persistent ids pointing at other
zip entries. :func:`peek_top_level` unpickles ``data.pkl`` with an unpickler that imports
nothing: every class or function the pickle names becomes an inert :class:`_Opaque`
(``collections.OrderedDict`` becomes a dict), persistent ids become None. So the top-level
dict's ints, strings, lists and dicts come back; anything else is opaque. A file that is
not a whole zip, or a pickle this cannot walk, gives None (the caller treats it as "cannot
tell", never as a crash).
"""

from __future__ import annotations

import io
import pickle
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_MAX_PICKLE_BYTES = 256 * 1024 * 1024  # data.pkl holds structure, not tensor bytes


class _Opaque:
    """Stands for any object the pickle would build: accepts and ignores everything."""

    def __new__(cls, *args: Any, **kwargs: Any) -> _Opaque:
        return object.__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def append(self, value: Any) -> None:
        pass

    def extend(self, values: Any) -> None:
        pass


class _Dict(dict):  # type: ignore[type-arg]
    """``OrderedDict`` (state dicts pickle their ``_metadata`` as its state)."""

    def __setstate__(self, state: Any) -> None:
        pass


class _InertUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("collections", "OrderedDict"):
            return _Dict
        return _Opaque

    def persistent_load(self, pid: Any) -> None:
        return None


def peek_top_level(path: Path) -> Mapping[str, Any] | None:
    """The top-level dict a ``torch.save`` zip holds (values as described above), or None."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
            if len(names) != 1:
                return None
            if archive.getinfo(names[0]).file_size > _MAX_PICKLE_BYTES:
                return None
            raw = archive.read(names[0])
    except (OSError, zipfile.BadZipFile, KeyError, ValueError):
        return None
    try:
        data = _InertUnpickler(io.BytesIO(raw)).load()
    except Exception:  # noqa: BLE001 - any pickle we cannot walk is "cannot tell"
        return None
    return data if isinstance(data, dict) else None


def peek_int(path: Path, key: str) -> int | None:
    """``data[key]`` when it is a plain int (not a bool), else None."""
    data = peek_top_level(path)
    value = None if data is None else data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None
