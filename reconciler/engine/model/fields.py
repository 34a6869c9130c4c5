"""Typed reads of Kubernetes objects held as plain dicts (the JSON shape, camelCase keys).

Every reader names the field it read, so an error says where the object is wrong
(``spec.containers[0].resources.requests.cpu: invalid quantity 'abc'``). Absent optional
fields read as empty; present fields of the wrong type are errors.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


class ObjectError(ValueError):
    """An object is malformed. ``field`` is the dotted path (``spec.containers[0].name``)
    and ``why`` what is wrong; ``str()`` is ``"<field>: <why>"``."""

    def __init__(self, field: str, why: str) -> None:
        self.field, self.why = field, why
        super().__init__(f"{field}: {why}" if field else why)

    def below(self, base: str) -> ObjectError:
        """The same error with its field read below ``base``: a reader of a part of an
        object names fields from that part (``key``), its caller adds where the part is
        (``spec.tolerations[2]``), and only when there is an error."""
        if not self.field:
            return ObjectError(base, self.why)
        if not base or self.field.startswith("["):
            return ObjectError(base + self.field, self.why)
        return ObjectError(f"{base}.{self.field}", self.why)


def _join(base: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{base}[{key}]"
    return f"{base}.{key}" if base else key


def mapping(obj: Mapping[str, Any], key: str, base: str = "", required: bool = False) -> Mapping[str, Any]:
    """``obj[key]`` as a mapping (empty when absent or null)."""
    value = obj.get(key)
    if type(value) is dict:  # what JSON and YAML give: no need for the ABC check
        return value
    if value is None:
        if required:
            raise ObjectError(_join(base, key), "missing field")
        return {}
    if not isinstance(value, Mapping):
        raise ObjectError(_join(base, key), f"expected a mapping, got {type(value).__name__}")
    return value


def sequence(obj: Mapping[str, Any], key: str, base: str = "", required: bool = False) -> Sequence[Any]:
    """``obj[key]`` as a list (empty when absent or null)."""
    value = obj.get(key)
    if value is None:
        if required:
            raise ObjectError(_join(base, key), "missing field")
        return []
    if not isinstance(value, list):
        raise ObjectError(_join(base, key), f"expected a list, got {type(value).__name__}")
    return value


def string(obj: Mapping[str, Any], key: str, base: str = "", required: bool = False, default: str = "") -> str:
    """``obj[key]`` as a non-empty string when required, else the string or ``default``."""
    value = obj.get(key)
    if type(value) is str and value:
        return value
    if value is None or value == "":
        if required:
            raise ObjectError(_join(base, key), "missing field")
        return default
    if not isinstance(value, str):
        raise ObjectError(_join(base, key), f"expected a string, got {type(value).__name__}")
    return value


def item(items: Sequence[Any], index: int, base: str) -> Mapping[str, Any]:
    """``items[index]`` as a mapping, named ``base[index]`` in errors."""
    value = items[index]
    if not isinstance(value, Mapping):
        raise ObjectError(_join(base, index), f"expected a mapping, got {type(value).__name__}")
    return value


def string_map(obj: Mapping[str, Any], key: str, base: str = "", *, share: bool = False) -> dict[str, str]:
    """``obj[key]`` as a str -> str mapping (labels, annotations, nodeSelector). Values
    that YAML read as numbers or booleans are refused, as the API server refuses them.
    ``share``: keys and values are :func:`shared` (labels a cache holds for every pod)."""
    raw = mapping(obj, key, base)
    out: dict[str, str] = {}
    for k, v in raw.items():
        if type(v) is not str and not isinstance(v, str):
            raise ObjectError(_join(_join(base, key), str(k)), f"expected a string, got {type(v).__name__}")
        k = k if type(k) is str else str(k)
        if share:
            k, v = shared(k), shared(v)
        out[k] = v
    return out


def shared(value: str) -> str:
    """``value``, or the one equal string already in use (:func:`sys.intern`): the values
    repeated across the objects of a large cluster (namespaces, node names, label keys and
    values, timestamps of one release) held once, as a cache of 100,000 pods needs
    (docs/decisions/059-cache-keeps-parsed-forms.md). A ``str`` subclass is returned as it is."""
    return sys.intern(value) if type(value) is str else value


def path(base: str, *keys: str | int) -> str:
    """The dotted path of ``keys`` below ``base``: ``path("spec", "containers", 0)``."""
    for k in keys:
        base = _join(base, k)
    return base


def filled(cls: type[T], values: dict[str, Any]) -> T:
    """An instance of the frozen dataclass ``cls`` holding ``values``, a value for every
    field: what its generated ``__init__`` makes, without the frozen ``__setattr__``
    check per field. A class with ``__slots__`` (the parsed pods and nodes a cache holds by
    the hundred thousand: docs/decisions/059-cache-keeps-parsed-forms.md) gets each slot
    set through its descriptor; any other its ``__dict__`` in one update. Only for
    ``from_object``, which gives every field (a test holds them to it)."""
    obj = object.__new__(cls)
    setters = _SLOT_SETTERS.get(cls)
    if setters is None and "__slots__" in cls.__dict__:
        setters = _SLOT_SETTERS[cls] = {name: getattr(cls, name).__set__ for name in cls.__dict__["__slots__"]}
    if setters is None:
        obj.__dict__.update(values)
    else:
        for name, value in values.items():
            setters[name](obj, value)
    return obj


#: Per slotted class: each field's descriptor setter (:func:`filled`).
_SLOT_SETTERS: dict[type, dict[str, Any]] = {}
