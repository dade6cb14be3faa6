"""Row subsets whose aligned fields are gathered when first read (``Configs.take``, ``RowLengths.take``).

A capacity search takes subsets of its configurations and lengths on every probe and reads few of
their fields, so a subset records (the full set it came from, the row indices into it) and gathers a
field — ``value[index]`` for an array, the items at ``index`` for a list — on first access. A subset
of a subset indexes the full set directly. Pickling writes every field out (the full set is not sent).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar

import numpy as np


class LazySubset:
    """Mixin: ``_LAZY_FIELDS`` of a subset made by ``_mark_taken`` are gathered on first read."""

    _LAZY_FIELDS: ClassVar[frozenset[str]] = frozenset()

    def _mark_taken(self, new: LazySubset, index: np.ndarray) -> None:
        """Make ``new`` the rows ``index`` of ``self`` (of the full set ``self`` may itself come from)."""
        source, base = self.__dict__.get("_taken", (self, None))
        new.__dict__["_taken"] = (source, index if base is None else base[index])

    if not TYPE_CHECKING:  # type checkers see the declared fields only
        def __getattr__(self, name: str):
            taken = self.__dict__.get("_taken")
            if taken is None or name not in type(self)._LAZY_FIELDS:
                raise AttributeError(name)
            source, index = taken
            value = source.__dict__[name]
            value = value[index] if isinstance(value, np.ndarray) else [value[i] for i in index.tolist()]
            self.__dict__[name] = value
            return value

    def _gathered(self, names: Iterable[str]) -> dict:
        """Every field of ``names`` gathered (for ``__getstate__``: a pickled subset does not carry its source)."""
        return {name: getattr(self, name) for name in names}
