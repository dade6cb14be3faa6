"""Load the built-in catalog, merge a user's overrides, resolve names with suggestions."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from catalog.architecture import attention_params, parameter_counts
from catalog.errors import CatalogError, suggest
from catalog.files import format_validation_error, parse_yaml_text, read_json, read_yaml
from catalog.schema import (
    SOURCED_FIELDS,
    Device,
    Model,
    Platform,
    Precision,
    Source,
    cloud_instance_problem,
)

_OVERRIDE_SECTIONS = ("devices", "models", "platforms")


def _builtin(name: str) -> list[dict[str, Any]]:
    text = resources.files("catalog").joinpath("data", f"{name}.yaml").read_text("utf-8")
    return parse_yaml_text(text, f"built-in {name}.yaml", CatalogError, shipped=True)[name]


@dataclass(frozen=True)
class Catalog:
    """Devices, models and precisions by key; models also by alias and Hugging Face id."""

    devices: dict[str, Device]
    models: dict[str, Model]
    precisions: dict[str, Precision]
    model_aliases: dict[str, str] = field(default_factory=dict)
    override_file: str | None = None
    platforms: dict[str, Platform] = field(default_factory=dict)

    def platform_of(self, device_key: str) -> Platform | None:
        """The platform a device is bought on, or None (a user's device with no platform listed)."""
        for p in self.platforms.values():
            if device_key in p.devices:
                return p
        return None

    def platform(self, name: str) -> Platform:
        key = name.strip().lower()
        if key in self.platforms:
            return self.platforms[key]
        raise CatalogError(f"unknown platform '{name}'{suggest(key, self.platforms)}; "
                           "see catalog/data/platforms.yaml")

    def with_platform_overrides(self, overrides: dict[str, dict[str, Any]], where: str) -> Catalog:
        """A catalog whose platforms have some fields replaced (a plan's ``platforms:`` section)."""
        platforms = dict(self.platforms)
        for key, fields in overrides.items():
            base = self.platform(key)
            platforms[base.key] = _validate(Platform, {**base.model_dump(), **fields}, f"{where}: platforms.{key}")
        return _checked_platforms(replace(self, platforms=platforms), where)

    def device(self, name: str) -> Device:
        key = name.strip().lower().replace("_", "-")
        if key in self.devices:
            return self.devices[key]
        raise CatalogError(f"unknown device '{name}'{suggest(key, self.devices)}; "
                           "see `gpuplan catalog devices`")

    def model(self, name: str) -> Model:
        key = self.model_aliases.get(name) or self.model_aliases.get(name.strip().lower())
        if key:
            return self.models[key]
        raise CatalogError(f"unknown model '{name}'{suggest(name.lower(), self.model_aliases)}; "
                           "see `gpuplan catalog models`, or pass --model-config config.json")

    def precision(self, name: str) -> Precision:
        key = name.strip().lower()
        if key in self.precisions:
            return self.precisions[key]
        raise CatalogError(f"unknown precision '{name}'{suggest(key, self.precisions)}; "
                           f"known: {', '.join(self.precisions)}")

    def with_model(self, model: Model) -> Catalog:
        """A catalog that also knows ``model`` (e.g. read from a config.json)."""
        models = {**self.models, model.key: model}
        return replace(self, models=models, model_aliases=_alias_map(models, f"model {model.key}"))

    def with_device_overrides(self, overrides: dict[str, dict[str, Any]], where: str) -> Catalog:
        """A catalog whose devices have some fields replaced (scenario what-ifs)."""
        devices = dict(self.devices)
        for key, fields in overrides.items():
            base = self.device(key)
            if "key" in fields and str(fields["key"]).strip().lower() != base.key:
                raise CatalogError(f"{where}: devices.{key}.key: a device's key cannot be changed (got "
                                   f"{fields['key']!r}); add a new device with a --catalog file instead")
            data = {**base.model_dump(), **fields}
            # a figure set here without a catalog source has the override itself as its basis
            new = {f: f"set by {where}: devices.{key}" for f in fields
                   if f in SOURCED_FIELDS and f not in base.sources and f not in base.estimated}
            if new:
                data["estimated"] = {**base.estimated, **new}
            devices[base.key] = _validate(Device, data, f"{where}: devices.{key}")
        return checked_cloud_instances(replace(self, devices=devices), where)


def _checked_platforms(catalog: Catalog, where: str) -> Catalog:
    """The catalog, once every platform names known devices and no device is on two platforms."""
    owner: dict[str, str] = {}
    for p in catalog.platforms.values():
        for d in p.devices:
            if d not in catalog.devices:
                raise CatalogError(f"{where}: platform '{p.key}' lists unknown device '{d}'"
                                   f"{suggest(d, catalog.devices)}")
            if d in owner:
                raise CatalogError(f"{where}: device '{d}' is on two platforms ('{owner[d]}' and '{p.key}'); "
                                   "keep it on one")
            owner[d] = p.key
    return checked_cloud_instances(catalog, where)


def checked_cloud_instances(catalog: Catalog, where: str) -> Catalog:
    """The catalog, once every device's ``cloud_gpus_per_instance`` is a slice of its server
    (:func:`catalog.schema.cloud_instance_problem`)."""
    for key, dev in catalog.devices.items():
        if (problem := cloud_instance_problem(dev, catalog.platform_of(key))) is not None:
            raise CatalogError(f"{where}: devices.{key}.{problem}")
    return catalog


def _alias_map(models: dict[str, Model], where: str = "catalog") -> dict[str, str]:
    """Every name of every model (key, Hugging Face id, aliases; also lowercased) → its key.

    A name that two models claim is an error (an alias must never silently replace a model):
    keys are claimed first, so the message names the alias that shadows an existing key.
    """
    aliases: dict[str, str] = {}
    for model in models.values():
        aliases[model.key] = model.key
    for model in models.values():
        for name in [model.key, model.hf_id, *model.aliases]:
            for variant in (name, name.lower()):
                owner = aliases.setdefault(variant, model.key)
                if owner != model.key:
                    raise CatalogError(
                        f"{where}: models: name '{name}' of model '{model.key}' is already model '{owner}'"
                        f"{' (its key)' if owner == variant else ''}; remove it from '{model.key}'s aliases "
                        f"or hf_id, or override '{owner}' instead"
                    )
    return aliases


def _validate(cls, data: dict[str, Any], where: str):
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise CatalogError(format_validation_error(where, exc, cls)) from None


def _by_key(entries: list[dict[str, Any]], cls, where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, entry in enumerate(entries):
        item = _validate(cls, entry, f"{where}[{i}]")
        if item.key in out:
            raise CatalogError(f"{where}: duplicate key '{item.key}'")
        out[item.key] = item
    return out


def _merge_overrides(
    base: dict[str, Any], entries: Any, cls, path: Path, section: str
) -> dict[str, Any]:
    """Entries whose key exists replace the given fields; new keys must be complete entries."""
    if not isinstance(entries, list):
        raise CatalogError(f"{path}: {section}: expected a list of entries, got {type(entries).__name__}")
    merged = dict(base)
    seen: dict[str, int] = {}  # key -> index of its entry in this file
    for i, entry in enumerate(entries):
        where = f"{path}: {section}[{i}]"
        if not isinstance(entry, dict) or "key" not in entry:
            raise CatalogError(f"{where}: each entry needs a 'key' (an existing one to override, or a new one)")
        key = str(entry["key"])
        if key in seen:  # each entry starts from the built-in figures: the later one silently undid the earlier
            raise CatalogError(f"{where}.key: '{key}' is also {section}[{seen[key]}] of this file; give each key one "
                               "entry, with every field you change")
        seen[key] = i
        if key not in base and key.strip().lower() in base:
            raise CatalogError(f"{where}.key: keys are lowercase; '{key.strip().lower()}' already exists "
                               f"(write key: {key.strip().lower()} to override it, or pick a new lowercase key)")
        data = {**base[key].model_dump(), **entry} if key in base else entry
        try:
            merged[key] = cls.model_validate(data)
        except ValidationError as exc:
            raise CatalogError(format_validation_error(str(path), exc, cls, prefix=f"{section}[{i}]")) from None
    return merged


@functools.cache
def builtin_devices() -> dict[str, Device]:
    """The shipped devices, before any user override (what a figure is compared with to tell
    a user's quote from a catalog figure)."""
    return _by_key(_builtin("devices"), Device, "built-in devices.yaml")


def load_catalog(override_path: Path | str | None = None) -> Catalog:
    """The built-in catalog, with the entries of a user's YAML file added or overriding.

    An override file has ``devices:``, ``models:`` and/or ``platforms:`` lists; an entry whose ``key``
    exists replaces only the fields it gives (a negotiated price, say).
    """
    devices = _by_key(_builtin("devices"), Device, "built-in devices.yaml")
    platforms = _by_key(_builtin("platforms"), Platform, "built-in platforms.yaml")
    models = _by_key(_builtin("models"), Model, "built-in models.yaml")
    precisions = _by_key(_builtin("precisions"), Precision, "built-in precisions.yaml")
    if override_path is not None:
        path = Path(override_path)
        data = read_yaml(path, "catalog", CatalogError)
        unknown = set(data) - set(_OVERRIDE_SECTIONS)
        if unknown:
            name = sorted(unknown)[0]
            raise CatalogError(f"{path}: unknown section '{name}'{suggest(name, _OVERRIDE_SECTIONS)}; "
                               f"a catalog file has {' and/or '.join(_OVERRIDE_SECTIONS)}")
        if "devices" in data:
            devices = _merge_overrides(devices, data["devices"], Device, path, "devices")
        if "models" in data:
            models = _merge_overrides(models, data["models"], Model, path, "models")
        if "platforms" in data:
            platforms = _merge_overrides(platforms, data["platforms"], Platform, path, "platforms")
    catalog = Catalog(devices, models, precisions, _alias_map(models, str(override_path or "built-in models.yaml")),
                      str(override_path) if override_path else None, platforms)
    return _checked_platforms(catalog, str(override_path or "built-in platforms.yaml"))


def model_from_hf_config(path: Path | str, key: str | None = None) -> Model:
    """Build a Model from a local Hugging Face ``config.json`` (dense, GQA, MoE or MLA).

    Parameter count (``catalog.architecture.parameter_counts``) = embeddings (+ untied LM head)
    + per layer attention and FFN: attention q/k/v/o = hidden·heads·head_dim·2 +
    hidden·kv_heads·head_dim·2 (MLA: its low-rank projections); dense FFN =
    3·hidden·intermediate; MoE layer = (experts + shared) · 3·hidden·moe_intermediate +
    router. Norms and biases are negligible. A sliding window counts only when the config
    enables it; ``layer_types`` (gpt-oss, Gemma 3) says how many layers use it.

    Shared experts: ``n_shared_experts`` of width ``moe_intermediate_size`` (DeepSeek), or one of width
    ``shared_expert_intermediate_size`` (Qwen-MoE), counted as ceil(that / moe_intermediate_size) experts;
    Llama 4 (``intermediate_size_mlp`` or model_type llama4_text) has one shared expert per MoE layer, routed
    experts of width ``intermediate_size``, dense layers of ``intermediate_size_mlp``, and chunked attention
    (``attention_chunk_size``) on its RoPE layers (``no_rope_layers``; by default all but every 4th). A checkpoint
    whose ``quantization_config.modules_to_not_convert`` keeps attention (``self_attn``) unquantized in an MoE
    model quantizes its experts alone (``unquantized_dense``: gpt-oss).
    """
    path = Path(path)
    cfg = read_json(path, "model config", CatalogError)
    if not isinstance(cfg, dict):
        raise CatalogError(f"{path}: expected a JSON object")
    if isinstance(cfg.get("text_config"), dict):  # multimodal wrappers (Llama 4, Gemma 3, Mistral 3)
        cfg = {**cfg, **cfg["text_config"]}

    def whole(*names: str, default: int = 0) -> int:
        """The first of ``names`` the config gives a value (null and 0 count as not given): a whole number."""
        for name in names:
            value = cfg.get(name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise CatalogError(f"{path}: {name}: expected a whole number >= 0 (got {value!r}); fix the config")
            if value:
                return value
        return default

    def need(*names: str) -> int:
        value = whole(*names)
        if not value:
            raise CatalogError(f"{path}: {names[0]}: required positive integer is missing")
        return value

    layers = need("num_hidden_layers", "n_layer", "num_layers")
    types = cfg.get("layer_types")
    if types is not None and not (isinstance(types, list) and len(types) == layers
                                  and all(isinstance(t, str) for t in types)):
        got = f"a list of {len(types)}" if isinstance(types, list) else repr(types)
        raise CatalogError(f"{path}: layer_types: expected one attention kind per layer, a list of {layers} "
                           f"(num_hidden_layers), got {got}; fix the config or drop layer_types")
    hidden = need("hidden_size", "n_embd", "d_model")
    heads = need("num_attention_heads", "n_head")
    kv_heads = whole("num_key_value_heads", default=heads)
    head_dim = whole("head_dim")
    if not head_dim:
        if hidden % heads:
            raise CatalogError(f"{path}: hidden_size {hidden} is not a multiple of num_attention_heads {heads}, and "
                               "no head_dim is given; add head_dim (the width of one attention head)")
        head_dim = hidden // heads
    inter = need("intermediate_size", "ffn_hidden_size", "n_inner")
    vocab = need("vocab_size")
    experts = whole("n_routed_experts", "num_local_experts", "num_experts")
    per_tok = whole("num_experts_per_tok", "num_experts_per_token", "experts_per_token") if experts else 0
    moe_inter = whole("moe_intermediate_size", default=inter) if experts else 0
    # Llama 4: intermediate_size is the experts' width, intermediate_size_mlp the dense layers', one shared expert
    llama4 = bool(experts) and (cfg.get("model_type") == "llama4_text" or "intermediate_size_mlp" in cfg)
    if llama4:
        inter = whole("intermediate_size_mlp", default=inter)
    dense_first = whole("first_k_dense_replace")
    moe_step = whole("interleave_moe_layer_step", "decoder_sparse_step", default=1)
    moe_layers = max(layers - dense_first, 0) // moe_step if experts else 0
    shared = whole("n_shared_experts", default=1 if llama4 else 0) if experts else 0
    shared_width = whole("shared_expert_intermediate_size") if experts else 0
    if not shared and shared_width:
        shared = -(-shared_width // moe_inter)  # Qwen-MoE: one shared expert of that width, in routed experts' widths
    shared_inter = shared_width or (shared * moe_inter)
    kv_lora = whole("kv_lora_rank")
    rope = whole("qk_rope_head_dim")

    q_lora = whole("q_lora_rank")
    attn = attention_params(hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim, kv_lora_rank=kv_lora,
                            q_lora_rank=q_lora, qk_rope_head_dim=rope, qk_nope_head_dim=whole("qk_nope_head_dim"),
                            v_head_dim=whole("v_head_dim"))
    if kv_lora:
        head_dim = whole("v_head_dim", default=head_dim)
    tied = cfg.get("tie_word_embeddings")
    if tied is not None and not isinstance(tied, bool):
        raise CatalogError(f"{path}: tie_word_embeddings: expected true or false (got {tied!r}); fix the config")
    counts = parameter_counts(layers=layers, hidden=hidden, vocab=vocab, attention_per_layer=attn,
                              intermediate=inter, tied_embeddings=bool(tied), experts=experts, experts_per_token=per_tok,
                              moe_layers=moe_layers, moe_intermediate=moe_inter, shared_intermediate=shared_inter)
    max_context = whole("max_position_embeddings", default=4096)
    window, windowed_layers = _sliding_window(cfg, layers, max_context)
    window_kind = "sliding"
    chunk = cfg.get("attention_chunk_size")
    if window is None and isinstance(chunk, int) and not isinstance(chunk, bool) and 0 < chunk < max_context:
        window, windowed_layers, window_kind = chunk, _chunked_layers(cfg, layers), "chunked"
        if not windowed_layers:
            window = windowed_layers = None
    quant = cfg.get("quantization_config")
    keep = quant.get("modules_to_not_convert") if isinstance(quant, dict) else None
    unquantized_dense = bool(experts) and isinstance(keep, list) and any("self_attn" in str(m) for m in keep)
    name = key or str(cfg.get("_name_or_path") or path.parent.name or "custom-model")
    key = "".join(c if c.isalnum() or c in "._-" else "-" for c in name.lower()).strip("-.") or "custom-model"
    if key[0] in "._-":
        key = "m" + key
    data = {
        "key": key, "hf_id": str(cfg.get("_name_or_path") or key), "num_layers": layers,
        "hidden_size": hidden, "num_attention_heads": heads, "num_kv_heads": kv_heads,
        "head_dim": head_dim, "intermediate_size": inter, "vocab_size": vocab,
        "total_params_b": counts.total / 1e9, "active_params_b": counts.active / 1e9,
        "num_experts": experts, "experts_per_token": per_tok, "shared_experts": shared,
        "moe_intermediate_size": moe_inter if experts else 0, "moe_layers": moe_layers,
        "kv_lora_rank": kv_lora, "qk_rope_head_dim": rope if kv_lora else 0,
        "q_lora_rank": q_lora if kv_lora else 0, "tied_embeddings": bool(tied),
        "sliding_window_tokens": window, "sliding_window_layers": windowed_layers,
        "sliding_window_kind": window_kind, "unquantized_dense": unquantized_dense,
        "max_context_tokens": max_context,
        "source": Source(source=f"local config.json {path}", as_of="local"),
    }
    return _validate(Model, data, str(path))


def _chunked_layers(cfg: dict[str, Any], layers: int) -> int:
    """Layers of a Llama 4 config that attend within their chunk: those ``layer_types`` calls
    ``chunked_attention``, else those ``no_rope_layers`` marks 1 (RoPE layers), else all but every
    ``no_rope_layer_interval``-th (default 4: transformers' Llama4TextConfig)."""
    types = cfg.get("layer_types")
    if isinstance(types, list) and len(types) == layers:
        return sum(1 for t in types if t == "chunked_attention")
    rope = cfg.get("no_rope_layers")
    if isinstance(rope, list) and len(rope) == layers:
        return sum(1 for r in rope if r)
    interval = cfg.get("no_rope_layer_interval")
    interval = interval if isinstance(interval, int) and interval > 0 else 4
    return layers - layers // interval


def _sliding_window(cfg: dict[str, Any], layers: int, max_context: int) -> tuple[int | None, int | None]:
    """(window tokens, windowed layers) of a config, or (None, None) without a window in use
    (none stated, disabled, or not shorter than the context).

    Qwen-style configs carry a ``sliding_window`` they disable with ``use_sliding_window:
    false``; ``layer_types`` lists ``sliding_attention`` per layer where only some layers
    use it; otherwise every layer is windowed (Mistral-7B v0.1).
    """
    window = cfg.get("sliding_window")
    if (isinstance(window, bool) or not isinstance(window, int) or not 0 < window < max_context
            or cfg.get("use_sliding_window") is False):
        return None, None
    types = cfg.get("layer_types")
    if isinstance(types, list) and len(types) == layers:
        windowed = sum(1 for t in types if t == "sliding_attention")
        return (window, windowed) if windowed else (None, None)
    return window, layers
