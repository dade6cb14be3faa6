"""Serving techniques a replica may use: prefix caching and speculative decoding / MTP.

A :class:`ServingTechnique` changes two things the serving model sees, and nothing else:

- the **configurations** (:meth:`ServingTechnique.configure`): speculative decoding attaches
  its step cost (``Configs.speculative``, see :mod:`optimizer.models.speculative`) and the
  draft's weights and KV lower the KV capacity; a shared prefix's KV is held once per replica,
  so N shared tokens are taken off the capacity once;
- the **request lengths** (``optimizer.models.serving.state.lengths_for``): prefill work is
  the uncached tokens ``P = max(L·(1 − h) − N, 1)`` (h = hit fraction, N = shared prefix,
  at most L − 1), prefill attention spans start after the cached tokens, each sequence holds
  the KV of ``L − N`` own prompt tokens (h-cached tokens stay in its context), decode steps
  per request are ``(O − 1)/A`` with ``A`` tokens emitted per speculative step.

``ServingTechnique()`` (no cache, no speculation) is inactive: the serving model then runs
exactly its usual code path, so its numbers are today's bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from catalog.schema import Model
from optimizer.models.configs import Configs
from optimizer.models.speculative import SpeculativeCost, speculative_cost
from workloads.spec import Workload


@dataclass(frozen=True)
class ServingTechnique:
    """Prefix caching (``prefix_hit_fraction`` h or ``shared_prefix_tokens`` N) and speculative decoding."""

    prefix_hit_fraction: float = 0.0
    shared_prefix_tokens: float = 0.0
    speculative: SpeculativeCost | None = None

    @property
    def active(self) -> bool:
        return self.prefix_hit_fraction > 0 or self.shared_prefix_tokens > 0 or self.speculative is not None

    @property
    def tokens_per_step(self) -> float:
        """A: tokens a decoding sequence emits per step (1 without speculation)."""
        return self.speculative.tokens_per_step if self.speculative is not None else 1.0

    def label(self) -> str:
        """A short name for reports: ``mtp k3 a0.85``, ``prefix 60 %``, ``shared prefix 2,000``; '' if none."""
        parts = []
        if self.prefix_hit_fraction > 0:
            parts.append(f"prefix cache {self.prefix_hit_fraction:.0%}")
        if self.shared_prefix_tokens > 0:
            parts.append(f"shared prefix {self.shared_prefix_tokens:,.0f} tokens")
        if self.speculative is not None:
            s = self.speculative
            parts.append(f"{s.method} k{s.draft_tokens} a{s.acceptance_rate:g}")
        return ", ".join(parts)

    def configure(self, c: Configs) -> Configs:
        """``c`` with the speculative step cost attached and the KV capacity this technique leaves.

        KV capacity (tokens) = (free bytes per GPU − draft weights per GPU) / (KV bytes per token
        per GPU · (1 + draft KV ratio)) − e·N, where free bytes per GPU = capacity · KV bytes per
        token per GPU today (``configs.build_configs``); the shared prefix's N tokens are held once by each
        of the e = ep attention data-parallel ranks (each rank's prefix cache is its own).
        """
        if not self.active:
            return c
        cap = np.asarray(c.kv_capacity_tokens, dtype=float)
        if self.speculative is not None:
            s = self.speculative
            kv_per_gpu = c.kv_bytes_per_token / (c.kv_shards * c.pp)
            bytes_per_param = c.weight_bytes_total / (c.model.total_params_b * 1e9)
            free = cap * kv_per_gpu - s.held_weight_params * bytes_per_param / c.gpus
            cap = free / (kv_per_gpu * (1.0 + s.held_kv_ratio))
        cap = np.maximum(cap - np.asarray(c.ep, dtype=float) * self.shared_prefix_tokens, 0.0)
        return replace(c, kv_capacity_tokens=cap, speculative=self.speculative)


def cached_prefix_tokens(prompt_tokens, shared_prefix_tokens: float = 0.0):
    """N' = min(N, L − 1): the shared prefix a prompt of L tokens reads from the cache (at least one token is its
    own); scalars or arrays."""
    return np.minimum(shared_prefix_tokens, np.asarray(prompt_tokens, dtype=float) - 1.0)


def uncached_prompt_tokens(prompt_tokens, hit_fraction: float = 0.0, shared_prefix_tokens: float = 0.0):
    """The prompt tokens prefill computes under a prefix cache: ``P = max(L·(1 − h) − N', 1)``, N' = min(N, L − 1)
    (h = hit fraction, N = shared prefix): the serving model's prompt nodes (``serving.state._technique_lengths``)
    and the long-prompt warning's length (``planning.known_limits``); scalars or arrays."""
    ln = np.asarray(prompt_tokens, dtype=float)
    return np.maximum(ln * (1.0 - hit_fraction) - cached_prefix_tokens(ln, shared_prefix_tokens), 1.0)


def workload_technique(w: Workload, target: Model, draft: Model | None = None,
                       speculative: bool = True) -> ServingTechnique:
    """The technique a workload states: its prefix cache, and its speculative decoding when
    ``speculative`` (the candidates evaluate a workload with and without it)."""
    pc = w.prefix_cache
    spec = w.speculative
    cost = (speculative_cost(spec.method, spec.tokens, spec.acceptance_rate, target, draft)
            if spec is not None and speculative else None)
    return ServingTechnique(
        prefix_hit_fraction=float(pc.hit_fraction or 0.0) if pc else 0.0,
        shared_prefix_tokens=float(pc.shared_prefix_tokens or 0) if pc else 0.0,
        speculative=cost,
    )
