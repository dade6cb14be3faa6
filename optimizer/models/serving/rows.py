"""Request lengths per row: one serving-model call evaluates configurations on many length sets at once.

A capacity search costs numpy's per-call overhead × bracket steps × fixed-point iterations, whatever
its number of rows; evaluating a workload's buckets one call each paid that overhead once per bucket.
:class:`RowLengths` gives every row (configuration × length set) its own quadrature and moments, so
the rows of G length sets run as one call. ``group`` names each row's length set: what the serving
model computes over "the rows of one call" (the largest prompt count a step's Poisson count
resolves, ``state.group_k_max``) is taken per group, so a row gets the figures it gets alone with the
other rows of its own length set, within rounding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from optimizer.models.lazy_subset import LazySubset

_NODE_FIELDS = ("l_nodes", "l_w", "l_var", "l_dev", "o_nodes", "o_w", "o_var")
_SCALAR_FIELDS = ("mean_l", "var_l", "mean_o1", "mean_o", "ctx", "kv_tok_steps", "kv_tok2_steps", "kv_prompt_tokens",
                  "span_offset", "tokens_per_step", "kv_tok3_steps", "kv_mean2_steps",
                  "mean_min_steps", "ctx_var_tokens2")
_ROW_FIELDS = _NODE_FIELDS + _SCALAR_FIELDS + ("group", "l_count")


@dataclass(frozen=True)
class RowLengths(LazySubset):
    """The fields of :class:`~optimizer.models.serving.state.Lengths` per row: node arrays (N, Q),
    the rest (N,); ``group`` (N,) the index of the row's length set among ``n_groups``, ``l_count`` (N,)
    its number of prompt nodes; ``base`` one row per length set (itself when each set has one row),
    ``grids`` a cache of what the serving model computes per length set (both shared by ``take``).

    Length sets with fewer nodes are padded to Q with copies of their last node at weight 0 (every
    use of a node is weighted by its weight, or limited to nodes of weight > 0)."""

    l_nodes: np.ndarray
    l_w: np.ndarray
    l_var: np.ndarray
    l_dev: np.ndarray  # (N, QL, 8)
    o_nodes: np.ndarray
    o_w: np.ndarray
    o_var: np.ndarray
    mean_l: np.ndarray
    var_l: np.ndarray
    mean_o1: np.ndarray
    mean_o: np.ndarray
    ctx: np.ndarray
    kv_tok_steps: np.ndarray
    kv_tok2_steps: np.ndarray
    kv_prompt_tokens: np.ndarray
    span_offset: np.ndarray
    tokens_per_step: np.ndarray
    kv_tok3_steps: np.ndarray
    kv_mean2_steps: np.ndarray
    mean_min_steps: np.ndarray
    ctx_var_tokens2: np.ndarray
    group: np.ndarray
    l_count: np.ndarray
    n_groups: int
    base: RowLengths | None = field(default=None, repr=False, compare=False)
    grids: dict = field(default_factory=dict, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.group)

    def take(self, rows: np.ndarray) -> RowLengths:
        """The lengths of ``rows`` (the groups keep their indices, ``base`` and ``grids`` are shared).

        Each field is gathered when first read (``optimizer.models.lazy_subset``), from the rows it was taken from: a
        capacity search takes subsets every probe, and its fixed-point loop reads 3 of the 20 fields."""
        new = object.__new__(RowLengths)
        new.__dict__.update(n_groups=self.n_groups, base=self.base, grids=self.grids)
        self._mark_taken(new, rows)
        return new

    def __getstate__(self) -> dict:
        """Every field gathered (a pickled subset does not carry the rows it was taken from)."""
        state = self._gathered(_ROW_FIELDS)
        state.update(n_groups=self.n_groups, base=self.base, grids=self.grids)
        return state


RowLengths._LAZY_FIELDS = frozenset(_ROW_FIELDS)  # gathered on first read in a subset (``take``)


def row_lengths(sets: Sequence[Any], rows_per_set: int | Sequence[int]) -> RowLengths:
    """Rows of length set g (a ``state.Lengths``) repeated ``rows_per_set`` (or ``rows_per_set[g]``) times, sets in order."""
    counts = [rows_per_set] * len(sets) if isinstance(rows_per_set, int) else list(rows_per_set)
    group = np.repeat(np.arange(len(sets)), counts)
    q_l = max(len(s.l_nodes) for s in sets)
    q_o = max(len(s.o_nodes) for s in sets)
    per_set = {}
    for name in _NODE_FIELDS:
        q = q_l if name.startswith("l_") else q_o
        per_set[name] = np.stack([_pad(getattr(s, name), q, name.endswith("_w")) for s in sets])
    for name in _SCALAR_FIELDS:
        per_set[name] = np.array([float(getattr(s, name)) for s in sets])
    per_set["group"] = np.arange(len(sets))
    per_set["l_count"] = np.array([len(s.l_nodes) for s in sets])
    base = RowLengths(**per_set, n_groups=len(sets))
    object.__setattr__(base, "base", base)
    return RowLengths(**{k: v[group] for k, v in per_set.items()}, n_groups=len(sets), base=base, grids=base.grids)


def _pad(values: np.ndarray, q: int, weight: bool) -> np.ndarray:
    """``values`` padded to ``q`` entries (along the first axis): 0 for weights, the last entry for the rest."""
    if len(values) == q:
        return values
    if weight:
        return np.concatenate([values, np.zeros(q - len(values))])
    return np.concatenate([values, np.repeat(values[-1:], q - len(values), axis=0)])
