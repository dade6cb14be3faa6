"""The plan file: what must be served (workloads) and the money and facility limits.

Loaded from YAML by :func:`workloads.load.load_plan`; every model here is strict
(unknown fields are errors) and every quantity has its unit in its name.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Annotated, Literal, get_args

from pydantic import BeforeValidator, Field, field_validator, model_validator

from catalog.constants import (
    HOURS_PER_YEAR,
    MAX_COLOCATION_USD_PER_KW_MONTH,
    MAX_COLOCATION_USD_PER_RACK_MONTH,
    MAX_NETWORK_USD_PER_SERVER,
    MAX_SERVER_POWER_W,
    MAX_SERVER_USD,
    MAX_WORKLOADS,
    SECONDS_PER_HOUR,
    Z99,
)
from catalog.errors import suggest
from catalog.schema import Strict

PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]

MAX_QPS = 1e7  # ten million requests per second: beyond any real service; catches unit slips
MAX_TOKENS = 10_000_000
# p99/mean = exp(z·σ − σ²/2) of a lognormal is largest at σ = z: exp(z²/2) = 14.968 (LengthDist.lognormal_sigma)
MAX_LOGNORMAL_P99_RATIO = math.exp(Z99 * Z99 / 2.0)
BATCH_WINDOW_HOURS = 24.0  # a batch workload's default window: the whole day
_NORMAL = NormalDist()


def lower_names(value):
    """Names of closed sets (precisions, engines, objective, redundancy) are case-insensitive, as device keys and
    model names are (``plan_key``, ``Catalog.model``): ``FP8`` is ``fp8``, ``TRTLLM`` is ``trtllm``; anything
    but text (a list's text entries) is left for the field's own check to name."""
    if isinstance(value, str):
        return value.strip().lower()
    if isinstance(value, list):
        return [v.strip().lower() if isinstance(v, str) else v for v in value]
    return value


class LengthDist(Strict):
    """A token-length distribution: fixed, lognormal from mean and p99, or a histogram.

    Written in YAML as a number (fixed), ``{mean: M, p99: P}`` or
    ``{histogram: [[tokens, weight], ...]}``. A lognormal may carry ``max: X`` (tokens): the law is then
    the lognormal fitted to ``{mean, p99}`` *conditioned on* length <= X (requests longer than X do not
    exist; ``mean_tokens`` and ``p99_tokens`` are those of the conditional law). The planner sets it
    where a request would not fit the model's context window (``optimizer.models.lengths.fit_window``).
    """

    mean: Annotated[float, Field(gt=0, le=MAX_TOKENS, allow_inf_nan=False)] | None = None
    p99: Annotated[float, Field(gt=0, le=MAX_TOKENS, allow_inf_nan=False)] | None = None
    histogram: list[tuple[Annotated[float, Field(gt=0, le=MAX_TOKENS, allow_inf_nan=False)],
                          Annotated[float, Field(gt=0, allow_inf_nan=False)]]] | None = None
    # a cut, not a stated length: no MAX_TOKENS bound, as the planner cuts at a model's context window
    # (optimizer.models.lengths.fit_window), which may be above it (Llama 4 Scout: 10,485,760 tokens)
    max: Annotated[float, Field(ge=1, allow_inf_nan=False)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_number(cls, data):
        if isinstance(data, int | float) and not isinstance(data, bool):
            return {"mean": data}
        return data

    @model_validator(mode="after")
    def _check(self) -> LengthDist:
        if self.histogram is not None:
            if self.mean is not None or self.p99 is not None:
                raise ValueError("give either a histogram or mean/p99, not both")
            if not self.histogram:
                raise ValueError("histogram is empty; give [[tokens, weight], ...]")
            tokens = [t for t, _ in self.histogram]
            if len(set(tokens)) != len(tokens):
                raise ValueError("histogram repeats a token length; merge the duplicate rows")
        elif self.mean is None:
            raise ValueError("give a number, {mean, p99} or {histogram: [[tokens, weight], ...]}")
        elif self.mean < 1:  # before the p99 rules: mean 5e-324 made p99 "inf× the mean"
            raise ValueError(f"{self.mean:g} tokens is less than one token; write lengths in tokens, not thousands "
                             f"(512, not 0.5)")
        elif self.p99 is not None and self.p99 < self.mean:
            # enough digits to tell them apart (511.9999 against 512 printed as 'p99 (512) is below the mean (512)')
            p99, mean = f"{self.p99:g}", f"{self.mean:g}"
            if p99 == mean:
                p99, mean = repr(self.p99), repr(self.mean)
            raise ValueError(f"p99 ({p99}) is below the mean ({mean}); p99 must be >= mean")
        elif self.p99 is not None and self.p99 > MAX_LOGNORMAL_P99_RATIO * self.mean:
            top = MAX_LOGNORMAL_P99_RATIO * self.mean
            raise ValueError(f"p99 ({self.p99:g}) is {self.p99 / self.mean:.3g}× the mean ({self.mean:g}), beyond any "
                             f"lognormal's (at most {MAX_LOGNORMAL_P99_RATIO:.2f}× the mean: {math.floor(top):,} "
                             "here); give the lengths as {histogram: [[tokens, weight], ...]}, or a p99 <= "
                             f"{math.floor(top):,}")
        if self.max is not None and self.kind != "lognormal":
            raise ValueError(f"max ({self.max:g}) cuts a {{mean, p99}} law only; a fixed length or a histogram's "
                             "largest row is its own maximum: drop max")
        return self

    @property
    def kind(self) -> Literal["fixed", "lognormal", "histogram"]:
        if self.histogram is not None:
            return "histogram"
        return "fixed" if self.p99 is None or self.p99 == self.mean else "lognormal"

    @property
    def mean_tokens(self) -> float:
        """E[X]: the fixed value, the histogram's Σ t·w / Σ w, the lognormal's mean; with ``max`` = m,
        ``E[X | X <= m] = mean · Phi(z_m − sigma) / Phi(z_m)``, z_m = (ln m − mu) / sigma."""
        if self.histogram is not None:
            total = sum(w for _, w in self.histogram)
            return sum(t * w for t, w in self.histogram) / total
        if self.max is not None:
            _, sigma, z_m, kept = self.lognormal_cut()
            return float(self.mean) * _NORMAL.cdf(z_m - sigma) / kept  # type: ignore[arg-type]
        return float(self.mean)  # type: ignore[arg-type]

    @property
    def p99_tokens(self) -> float:
        if self.histogram is not None:
            total = sum(w for _, w in self.histogram)
            acc = 0.0
            for t, w in sorted(self.histogram):
                acc += w
                if acc >= 0.99 * total:
                    return t
            return max(t for t, _ in self.histogram)
        if self.max is not None:  # the conditional law's: exp(mu + sigma · Phi^-1(0.99 · Phi(z_m)))
            mu, sigma, _, kept = self.lognormal_cut()
            return math.exp(mu + sigma * _NORMAL.inv_cdf(0.99 * kept))
        return float(self.p99 if self.p99 is not None else self.mean)  # type: ignore[arg-type]

    def lognormal_cut(self) -> tuple[float, float, float, float]:
        """(mu, sigma, z_m, Phi(z_m)) of a lognormal: ``ln X ~ N(mu, sigma²)`` fitted to {mean, p99}
        (mu = ln mean − sigma²/2), z_m = (ln max − mu)/sigma the standardised cut and Phi(z_m) the share
        of the uncut law below it (no ``max``: z_m = inf, share 1)."""
        sigma = self.lognormal_sigma()
        mu = math.log(float(self.mean)) - sigma * sigma / 2.0  # type: ignore[arg-type]
        if self.max is None:
            return mu, sigma, math.inf, 1.0
        z_m = (math.log(self.max) - mu) / sigma
        return mu, sigma, z_m, _NORMAL.cdf(z_m)

    def lognormal_sigma(self) -> float:
        """σ of the lognormal with this mean and p99: solve p99/mean = exp(z·σ − σ²/2), z = 2.3263
        (the stated mean and p99: those of the law before any ``max`` cut)."""
        ratio = (self.p99_tokens / self.mean_tokens if self.histogram is not None
                 else float(self.p99 if self.p99 is not None else self.mean) / float(self.mean))  # type: ignore[arg-type]
        if ratio <= 1.0:
            return 0.0
        z = Z99
        # σ²/2 − zσ + ln(ratio) = 0 → smaller root (the larger one is an unphysical heavy tail).
        disc = z * z - 2.0 * math.log(ratio)
        if disc < 0:  # ratio above exp(z²/2) ≈ 15, the largest p99/mean a lognormal can have (refused by _check;
            return z  # a histogram's ratio may be larger: the widest lognormal)
        return z - math.sqrt(disc)


class SLO(Strict):
    """Latency objectives at the 99th percentile, in milliseconds."""

    ttft_p99_ms: PositiveFloat | None = None
    tpot_p99_ms: PositiveFloat | None = None
    e2e_p99_ms: PositiveFloat | None = None

    @property
    def is_empty(self) -> bool:
        return self.ttft_p99_ms is None and self.tpot_p99_ms is None and self.e2e_p99_ms is None


class PrefixCache(Strict):
    """Prompt tokens whose KV is already cached when a request arrives (vLLM/SGLang prefix caching).

    Give one of: ``hit_fraction`` (share of every prompt's tokens found in the cache; their
    KV is not recomputed, but each request still holds its whole context) or
    ``shared_prefix_tokens`` (a system prompt common to all requests: never recomputed after
    the first request, and its KV is held once per replica, not once per sequence).
    """

    hit_fraction: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] | None = None
    shared_prefix_tokens: Annotated[int, Field(ge=0, le=MAX_TOKENS)] | None = None

    @model_validator(mode="after")
    def _check(self) -> PrefixCache:
        if (self.hit_fraction is None) == (self.shared_prefix_tokens is None):
            raise ValueError("give exactly one of hit_fraction (share of prompt tokens cached, 0-1) "
                             "or shared_prefix_tokens (a prefix common to all requests)")
        return self


class Speculative(Strict):
    """Speculative decoding allowed for a workload: k draft tokens verified per target step.

    ``method``: ``mtp`` (the model's own multi-token-prediction layers, e.g. DeepSeek-V3/R1),
    ``eagle`` (a one-layer draft head on the target's features) or ``draft`` (a separate
    small model, ``draft_model``, a catalog key). ``acceptance_rate`` a is the probability that
    each successive draft token is accepted; a step yields (1 − a^(k+1))/(1 − a) tokens.
    """

    method: Literal["mtp", "draft", "eagle"]
    draft_model: str | None = None
    tokens: Annotated[int, Field(ge=1, le=16)]
    acceptance_rate: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]

    @model_validator(mode="after")
    def _check(self) -> Speculative:
        if self.method == "draft" and self.draft_model is None:
            raise ValueError("method 'draft' needs draft_model (a catalog key, e.g. llama-3.1-8b)")
        if self.method != "draft" and self.draft_model is not None:
            raise ValueError(f"draft_model is only used with method 'draft' (method is '{self.method}'); drop it")
        return self


DEFAULT_PRECISIONS = ("bf16", "fp16", "fp8")
Engine = Literal["trtllm", "vllm", "sglang"]
ENGINES: tuple[str, ...] = get_args(Engine)


class Workload(Strict):
    """One service: a model, its request rate and request sizes, and its SLOs.

    An online workload gives ``qps`` and an ``slo``; a batch workload gives
    ``tokens_per_day`` (output tokens) to be processed within ``batch_window_hours``.
    """

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)
    model: str
    qps: Annotated[float, Field(gt=0, le=MAX_QPS, allow_inf_nan=False)] | None = None
    tokens_per_day: Annotated[float, Field(gt=0, le=1e15, allow_inf_nan=False)] | None = None
    batch_window_hours: Annotated[float, Field(gt=0, le=24)] = BATCH_WINDOW_HOURS
    prompt_tokens: LengthDist
    output_tokens: LengthDist
    slo: SLO = SLO()
    precisions: list[str] = Field(default_factory=lambda: list(DEFAULT_PRECISIONS), min_length=1)
    engine: Engine | list[Engine] | None = Field(
        None, description="serving engine of every replica, or a list of engines any of which may serve "
        "(the optimizer plans each and picks the cheaper); None = the device's default (TensorRT-LLM "
        "on NVIDIA, vLLM on AMD and the rest: optimizer.models.params.default_engine)")
    min_replicas: Annotated[int, Field(ge=0, le=100_000)] = 1
    redundancy: Literal["none", "n+1", "n+1-node"] = Field(
        "none", description="n+1: survives losing any one replica; n+1-node: any one server (failure domain)"
    )
    peak_to_average_ratio: Annotated[float, Field(ge=1, le=100, allow_inf_nan=False)] = Field(
        1.0, description="qps is the peak the fleet is sized for; the average volume (for $/M tokens) is "
        "qps / this ratio. 1 = the peak is sustained all year"
    )
    prefix_cache: PrefixCache | None = None
    speculative: Speculative | None = Field(
        None, description="allow speculative decoding / MTP; the optimizer uses it where it is cheaper")
    disaggregation: Literal["allowed", "never"] = Field(
        "never", description="'allowed': the optimizer may serve the workload from separate prefill and "
                             "decode pools (KV sent over the scale-out network) where that is cheaper")

    @field_validator("prompt_tokens", "output_tokens")
    @classmethod
    def _whole_tokens(cls, value: LengthDist) -> LengthDist:
        """A request has at least one prompt token and produces at least one output token: a length (a fixed one, a
        mean, a histogram row) below 1 is not a length in tokens (`prompt_tokens: 0.5` planned half-token
        requests; 0.5 meaning '0.5k' was planned 1,000 times too short). Fractional means of 1 and up are fine."""
        lengths = [t for t, _ in value.histogram] if value.histogram is not None else [value.mean]
        short = min(x for x in lengths if x is not None)
        if short < 1:
            raise ValueError(f"{short:g} tokens is less than one token; write lengths in tokens, not thousands "
                             "(512, not 0.5)")
        return value

    @field_validator("precisions", "redundancy", "disaggregation", mode="before")
    @classmethod
    def _names_any_case(cls, value):
        """``precisions: [FP8]`` is fp8 (:func:`lower_names`)."""
        return lower_names(value)

    @field_validator("precisions")
    @classmethod
    def _precisions_once(cls, value: list[str]) -> list[str]:
        """Each precision once: the error names the field and the repeated entry, not the whole workload."""
        twice = sorted({v for v in value if value.count(v) > 1})
        if twice:
            raise ValueError(f"lists {', '.join(repr(v) for v in twice)} twice; list each precision once")
        return value

    @field_validator("engine", mode="before")
    @classmethod
    def _engine(cls, value):
        """One engine, a non-empty list of distinct engines, or None; anything else names the field and the fix."""
        if value is None:
            return None
        value = lower_names(value)  # TRTLLM is trtllm
        values = value if isinstance(value, list) else [value]
        bad = [v for v in values if v not in ENGINES]
        if bad or not values:
            hint = suggest(str(bad[0]), ENGINES) if bad else ""
            raise ValueError(f"{value!r} is not one of {', '.join(ENGINES)} (or a list of them){hint}; "
                             "write e.g. engine: vllm or engine: [vllm, sglang], or drop it for the device's default")
        if len(set(values)) != len(values):
            raise ValueError(f"{value!r} lists an engine twice; list each once")
        return value

    @property
    def engines(self) -> tuple[str | None, ...]:
        """The engines candidates are planned with: those of ``engine`` (a list: each), or (None,) =
        the device's default."""
        if self.engine is None:
            return (None,)
        return tuple(self.engine) if isinstance(self.engine, list) else (self.engine,)

    @model_validator(mode="after")
    def _check(self) -> Workload:
        if (self.qps is None) == (self.tokens_per_day is None):
            raise ValueError("give exactly one of qps (online service) or tokens_per_day (batch volume)")
        if self.qps is not None and self.slo.is_empty:
            raise ValueError("an online workload (qps) needs an slo with ttft_p99_ms, tpot_p99_ms or e2e_p99_ms")
        if self.tokens_per_day is not None:
            used = [name for name, on in (("slo", not self.slo.is_empty),
                                          ("peak_to_average_ratio", self.peak_to_average_ratio != 1.0),
                                          ("prefix_cache", self.prefix_cache is not None),
                                          ("speculative", self.speculative is not None),
                                          ("disaggregation", self.disaggregation == "allowed")) if on]
            if used:
                raise ValueError(f"{', '.join(used)} apply to online workloads (qps) only; the batch throughput "
                                 "model does not use them: drop them or give qps and an slo")
            rate = self.request_rate_qps
            if not rate <= MAX_QPS:  # a window of 1e-300 hours: the rate is inf, which no candidate serves
                raise ValueError(f"tokens_per_day {self.tokens_per_day:g} within batch_window_hours "
                                 f"{self.batch_window_hours:g} is {rate:.3g} requests/s of "
                                 f"{self.output_tokens.mean_tokens:g} output tokens, above {MAX_QPS:,.0f}: "
                                 "check the units (output tokens a day; a window in hours, e.g. 8)")
        elif self.batch_window_hours != BATCH_WINDOW_HOURS:
            raise ValueError(f"batch_window_hours ({self.batch_window_hours:g}) applies to batch workloads "
                             "(tokens_per_day) only; an online workload (qps) is served all day: drop it")
        for field in ("prompt_tokens", "output_tokens"):
            law: LengthDist = getattr(self, field)
            if law.max is not None and law.p99 is not None and law.max < law.p99:
                raise ValueError(
                    f"{field}.max ({law.max:g}) is below its p99 ({law.p99:g}): the cut would leave out "
                    f"{100 * (1 - law.lognormal_cut()[3]):.3g} % of the requests and serve a mean of "
                    f"{law.mean_tokens:,.0f} tokens, not {law.mean:g}; give max >= p99 (it cuts the tail only), "
                    "or state the mean and p99 of the lengths you serve")
        if self.prefix_cache is not None and self.prefix_cache.shared_prefix_tokens is not None \
                and self.prefix_cache.shared_prefix_tokens >= self.prompt_tokens.mean_tokens:
            raise ValueError(f"prefix_cache.shared_prefix_tokens {self.prefix_cache.shared_prefix_tokens} is not below "
                             f"the mean prompt ({self.prompt_tokens.mean_tokens:g} tokens); the prompt includes the "
                             "shared prefix")
        return self

    @property
    def is_batch(self) -> bool:
        return self.tokens_per_day is not None

    @property
    def request_rate_qps(self) -> float:
        """Online: qps. Batch: tokens_per_day / (mean output tokens · window seconds)."""
        if self.qps is not None:
            return self.qps
        return self.tokens_per_day / (self.output_tokens.mean_tokens * self.batch_window_hours * 3600.0)  # type: ignore[operator]

    @property
    def output_tokens_per_year(self) -> float:
        """Output tokens served in a year on average: qps / peak_to_average_ratio · mean output · 8760 h
        (batch: tokens_per_day · 365)."""
        if self.tokens_per_day is not None:
            return self.tokens_per_day * 365.0
        return self.request_rate_qps / self.peak_to_average_ratio * self.output_tokens.mean_tokens * SECONDS_PER_HOUR * HOURS_PER_YEAR


def _gpus_not_yes_no(value):
    """An inventory count that is no yes/no value: pydantic's int would read ``inventory: {a10: true}`` (YAML ``yes``,
    ``on``) as 1 GPU."""
    if isinstance(value, bool):
        raise ValueError(f"{str(value).lower()} is a yes/no value, not a number of GPUs; write the GPUs you have "
                         "(0 = none)")
    return value


def plan_key(name: str, *, device: bool = True) -> str:
    """A device key as ``catalog.Catalog.device`` looks it up (case, spaces and ``_`` / ``-`` do not matter), or a
    platform key as ``Catalog.platform`` does (case and spaces)."""
    key = str(name).strip().lower()
    return key.replace("_", "-") if device else key


class Budget(Strict):
    capex_usd: PositiveFloat | None = None
    annual_usd: PositiveFloat | None = Field(None, description="cap on yearly opex (tco) or rental (cloud)")


class Facility(Strict):
    """Optional facility costs: colocation by power or by rack space, network per server."""

    colocation_usd_per_kw_month: Annotated[NonNegFloat, Field(le=MAX_COLOCATION_USD_PER_KW_MONTH)] = Field(
        0.0, description="per kW of nameplate IT power, per month")
    colocation_usd_per_rack_month: Annotated[NonNegFloat, Field(le=MAX_COLOCATION_USD_PER_RACK_MONTH)] = Field(
        0.0, description="per rack of rack_units_per_rack, per month")
    rack_units_per_rack: Annotated[int, Field(ge=1, le=100)] = 42
    network_usd_per_server: Annotated[NonNegFloat, Field(le=MAX_NETWORK_USD_PER_SERVER)] = Field(
        0.0, description="capex per server: switch ports, optics, cables")


class Finance(Strict):
    """How finance books the purchase: straight-line depreciation, and leasing as the alternative."""

    depreciation_years: Annotated[int, Field(ge=1, le=20)] | None = Field(
        None, description="straight-line life of the hardware; default the horizon"
    )
    lease_interest_rate: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = Field(
        0.08, description="yearly rate of a lease (or loan) paying the capex back in equal yearly payments"
    )
    lease_years: Annotated[int, Field(ge=1, le=20)] | None = Field(None, description="default the horizon")


class Plan(Strict):
    """A plan file: workloads plus objective, money assumptions and facility limits."""

    name: str = "plan"
    objective: Literal["tco", "capex", "cloud"] = "tco"
    horizon_years: Annotated[int, Field(ge=1, le=20)] = 3
    electricity_usd_per_kwh: Annotated[float, Field(ge=0, le=10, allow_inf_nan=False)] = 0.10
    pue: Annotated[float, Field(ge=1, le=5, allow_inf_nan=False)] = 1.3
    power_utilization: Annotated[float, Field(gt=0, le=1)] = 0.7
    maintenance_fraction_per_year: Annotated[float, Field(ge=0, le=1)] = 0.05
    discount_rate: Annotated[float, Field(ge=0, le=1)] = 0.08
    server_overhead_usd: Annotated[NonNegFloat, Field(le=MAX_SERVER_USD)] | None = Field(
        None, description="per server, overrides every platform's server_usd (old plans); default the platform's"
    )
    server_power_w: Annotated[NonNegFloat, Field(le=MAX_SERVER_POWER_W)] | None = Field(
        None, description="per server, overrides every platform's server_power_w; default the platform's"
    )
    # bool and int first: pydantic's float would read `purchase_usd: true` as $1 and `cloud_gpus_per_instance: 0`
    # as 0.0; kept as given, the catalog's Strict check refuses a yes/no value where a number is due
    platforms: dict[str, dict[str, bool | int | float | str | None]] = Field(
        default_factory=dict, description="per-platform field overrides, e.g. {pcie-8: {gpus_per_server: 4}}"
    )
    allow_partial_servers: bool = Field(
        True, description="false: every server bought is full (no idle GPUs on a board, no empty PCIe slots)"
    )
    facility: Facility = Facility()
    finance: Finance = Finance()
    budget: Budget = Budget()
    max_power_kw: PositiveFloat | None = Field(
        None, description="nameplate IT power of your room (GPUs' TDP + servers); not applied under objective cloud")
    inventory: dict[str, Annotated[int, BeforeValidator(_gpus_not_yes_no), Field(ge=0)]] = Field(default_factory=dict)
    allowed_devices: list[str] | None = None
    devices: dict[str, dict[str, bool | int | float | str | None]] = Field(
        default_factory=dict, description="per-device field overrides, e.g. a negotiated purchase_usd"
    )
    api_usd_per_million_output_tokens: PositiveFloat | None = None
    api_usd_per_million_input_tokens: NonNegFloat = 0.0
    confidence: Annotated[float, Field(ge=0.5, le=0.99)] | None = Field(
        None, description="size every deployment so it meets its SLOs with this probability under the "
        "performance model's error (its fidelity band); None = the point estimate")
    # at least 1 %: below it every deployment carries a hundredth of its capacity, and at 5e-324 the capacities
    # underflowed to "no candidate can serve chat bucket 0", the field not named
    target_utilization: Annotated[float, Field(ge=0.01, le=1, allow_inf_nan=False)] = Field(
        1.0, description="cap on routed load / capacity at the SLO of every deployment (1 = up to capacity; at "
        "least 0.01)")
    demand_quantile: Annotated[float, Field(ge=0.5, le=0.999)] = Field(
        0.5, description="size for this quantile of a lognormal demand forecast with median = the stated "
        "rates and sigma demand_sigma (0.5 = the stated rates)")
    demand_sigma: Annotated[float, Field(ge=0, le=2)] = Field(
        0.25, description="sigma of log(demand / stated demand) used by demand_quantile")
    workloads: list[Workload] = Field(min_length=1, max_length=MAX_WORKLOADS)

    @field_validator("inventory", "devices", "platforms")
    @classmethod
    def _one_key_per_entry(cls, value: dict, info) -> dict:
        """Keys as the catalog looks them up (``catalog.Catalog.device``: case and ``_`` / ``-`` do not matter;
        platforms: case), each entry once: ``{H100-SXM: 0, h100-sxm: 16}`` kept whichever came last, and a
        capacity table's inventory lookup by key missed ``H100-SXM`` altogether."""
        device = info.field_name != "platforms"
        out: dict = {}
        for name, entry in value.items():
            key = plan_key(name, device=device)
            if key in out:
                first = next(n for n in value if plan_key(n, device=device) == key)
                raise ValueError(f"'{first}' and '{name}' name the same {'device' if device else 'platform'} {key}; "
                                 "keep one entry")
            out[key] = entry
        return out

    @field_validator("objective", mode="before")
    @classmethod
    def _objective_any_case(cls, value):
        """``objective: TCO`` is tco (:func:`lower_names`)."""
        return lower_names(value)

    @field_validator("allowed_devices")
    @classmethod
    def _allowed_as_keys(cls, value: list[str] | None) -> list[str] | None:
        """Device keys as the catalog looks them up, each once (``H100_SXM`` is ``h100-sxm``, as in inventory)."""
        return None if value is None else list(dict.fromkeys(plan_key(d) for d in value))

    @field_validator("workloads")
    @classmethod
    def _unique_names(cls, workloads: list[Workload]) -> list[Workload]:
        """Unique names, kept in name order: no result (routing, ties, p99s) depends on the file's order."""
        seen: set[str] = set()
        for w in workloads:
            if w.name in seen:
                raise ValueError(f"two workloads are named '{w.name}'; names must be unique")
            seen.add(w.name)
        return sorted(workloads, key=lambda w: w.name)

    @property
    def room_power_cap_kw(self) -> float | None:
        """The power cap the fleet is held to: ``max_power_kw``, none under objective cloud (rented GPUs draw
        the provider's power, not your room's)."""
        return None if self.objective == "cloud" else self.max_power_kw

    def workload(self, name: str) -> Workload:
        for w in self.workloads:
            if w.name == name:
                return w
        raise KeyError(name)
