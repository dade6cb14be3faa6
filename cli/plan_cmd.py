"""`gpuplan validate PLAN.yaml` and `gpuplan schema`."""

from __future__ import annotations

import json
from pathlib import Path

from catalog.errors import WorkloadError
from cli.common import fmt, load, plural, print_json, stdout, table


def validate_plan(path: Path, catalog_path: Path | None, model_config: Path | None, json_out: bool) -> None:
    """Check a plan file against the schema and the catalog, then print what it asks for."""
    from workloads.load import load_plan, resolve_catalog  # pydantic: not at `gpuplan --help`

    cat = load(catalog_path, model_config)
    plan = load_plan(path)
    cat = resolve_catalog(plan, cat, str(path))
    rows = []
    for w in plan.workloads:
        m = cat.model(w.model)
        rows.append({
            "name": w.name, "model": m.key, "kind": "batch" if w.is_batch else "online",
            "qps": round(w.request_rate_qps, 4),
            "prompt_tokens_mean": w.prompt_tokens.mean_tokens, "prompt_tokens_p99": w.prompt_tokens.p99_tokens,
            "output_tokens_mean": w.output_tokens.mean_tokens, "output_tokens_p99": w.output_tokens.p99_tokens,
            **w.slo.model_dump(), "precisions": w.precisions, "min_replicas": w.min_replicas,
            "redundancy": w.redundancy,
        })
    if json_out:
        print_json({"file": str(path), "valid": True, "objective": plan.objective, "workloads": rows})
        return
    stdout.print(f"[green]OK[/green] {path}: plan '{plan.name}', objective {plan.objective}, "
                 f"horizon {plural(plan.horizon_years, 'year')}, {plural(len(plan.workloads), 'workload')}")
    cols = ["workload", "model", "kind", "req/s", "prompt mean/p99", "output mean/p99",
            "TTFT p99 ms", "TPOT p99 ms", "E2E p99 ms", "precisions", "min replicas"]
    out = [[r["name"], r["model"], r["kind"], fmt(r["qps"], 2),
            f"{r['prompt_tokens_mean']:g}/{r['prompt_tokens_p99']:g}",
            f"{r['output_tokens_mean']:g}/{r['output_tokens_p99']:g}",
            fmt(r["ttft_p99_ms"]), fmt(r["tpot_p99_ms"]), fmt(r["e2e_p99_ms"]),
            ", ".join(r["precisions"]), r["min_replicas"]] for r in rows]
    stdout.print(table(None, cols, out, right={"req/s", "TTFT p99 ms", "TPOT p99 ms", "E2E p99 ms"}))


def plan_schema() -> str:
    from workloads.spec import Plan  # pydantic: not at `gpuplan --help`

    return json.dumps(Plan.model_json_schema(), indent=2)


def ensure_yaml(path: Path) -> None:
    if path.suffix.lower() not in {".yaml", ".yml", ".json"}:
        raise WorkloadError(f"{path}: expected a plan .yaml file or a measurements .csv file")
