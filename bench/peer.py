"""The peer way against the product: pandas + Great Expectations + XGBoost `pred_contribs`, same rows and reasons.

    .venv/bin/python bench/peer.py --rows 4000000 --repeat 1

What a data engineer writes without the product, for the credit job's partition: read it whole into pandas,
validate it with Great Expectations (an ephemeral context, the job's own suite JSON, `result_format` BASIC),
build the model input with the job's feature function, predict with the booster, explain the rows that need
reasons with `predict(pred_contribs=True)` and keep the top-k positive contributions as the job's reason codes
(the no-reason code where none is positive), write entity id, probability and reason codes to one Parquet file.

The peer is handed what the product had to work out, so the comparison flatters it: the scored rows and the
rows to explain are the ones the product published (its guards' quarantine and its decision rules, with the
calibrated interval they read, are not redone). Both run as child processes timed from spawn to exit, the
product as `score run` with the shipped spec against a running Prefect server (bench/e2e.py's
`non_approved` variant), the peer right after it in the same round.

Checks: the peer's reason codes equal the product's on every explained row (ties aside: XGBoost's float32
contributions may rank two near-equal features either way; the product recomputes such rows with XGBoost), and
its probability equals the logistic of the product's published raw margin. `peer_over_product` = peer wall ÷
product wall, goal ≥ 10.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from _data import DEMO_JOB, BenchData, add_data_arguments, data_from_args
from _harness import (
    PYTHON,
    add_api_argument,
    add_repeat_argument,
    checked,
    child_env,
    emit,
    last_json_line,
    measured_child,
    median,
    prefect_api,
    print_table,
)
from e2e import measured_e2e, variant_jobs_dir

GOAL = 10.0
VARIANT = "non_approved"


def _published(data: BenchData) -> Path:
    return data.data_dir / "output" / DEMO_JOB / "_current" / f"date={data.date}" / "predictions"


def _repaired(frame: Any, suite_path: Path) -> None:
    """The suite's repairs on a pandas DataFrame, in place, hand-written in pandas as a peer would (GX validates; it does not repair): a default
    for nulls and for values outside a range or set, or a clip to the range, in the suite's order."""
    for item in json.loads(suite_path.read_text())["expectations"]:
        guard, kwargs = item.get("meta", {}).get("guard", {}), item["kwargs"]
        if guard.get("action") != "repair":
            continue
        column = frame[kwargs["column"]]
        if item["type"] == "expect_column_values_to_not_be_null":
            frame[kwargs["column"]] = column.fillna(guard["default"])
        elif item["type"] == "expect_column_values_to_be_in_set":
            frame[kwargs["column"]] = column.where(column.isin(kwargs["value_set"]) | column.isna(), guard["default"])
        elif item["type"] == "expect_column_values_to_be_between":
            low, high = kwargs.get("min_value"), kwargs.get("max_value")
            if guard["repair"] == "clip":
                frame[kwargs["column"]] = column.clip(low, high)
                continue
            below = column <= low if kwargs.get("strict_min") else column < low
            above = column >= high if kwargs.get("strict_max") else column > high
            outside = (below | above) & column.notna()
            frame[kwargs["column"]] = column.where(~outside, guard["default"])
        else:
            raise SystemExit(f"peer: no pandas repair written for {item['type']}")


def peer_once(raw_dir: Path, published_dir: Path, suite_path: Path, model_path: Path, out_path: Path) -> dict:
    """One peer pass in this process; returns its timings and what it produced."""
    t0 = time.perf_counter()
    import numpy as np
    import pandas as pd
    import polars as pl
    import pyarrow.parquet as pq
    import xgboost as xgb

    import tasks  # noqa: F401  (Prefect telemetry off; the peer needs the job's feature function and codes)
    from tasks.features.credit_risk import FEATURES, feature_matrix
    from tasks.jobspec import load_job_spec
    from tasks.settings import current_settings

    spec = load_job_spec(DEMO_JOB, current_settings())
    t_oracle = time.perf_counter()
    codes = np.array([spec.prediction.reasons.codes[f].code for f in FEATURES], dtype=object)
    no_reason = spec.prediction.reasons.no_reason_code
    top_k = spec.prediction.reasons.top_k
    # The oracle: ids the product scored, and which of them it explained (untimed: the peer is handed them).
    published = pq.read_table(published_dir, columns=["entity_id", "reason_codes", "raw_margin"]).to_pandas()
    explained_ids = set(published.loc[published["reason_codes"].map(len) > 0, "entity_id"])
    scored_ids = set(published["entity_id"])
    t_start = time.perf_counter()
    oracle_s = t_start - t_oracle

    frame = pd.read_parquet(raw_dir)
    t_read = time.perf_counter()

    import great_expectations as gx
    from great_expectations.core import ExpectationSuite
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    asset = context.data_sources.add_pandas("peer").add_dataframe_asset("partition")
    batch = asset.add_batch_definition_whole_dataframe("whole").get_batch(batch_parameters={"dataframe": frame})
    suite = ExpectationSuite(**json.loads(suite_path.read_text()))
    validation = batch.validate(suite, result_format={"result_format": "BASIC"})
    t_validate = time.perf_counter()

    scored = frame[frame["entity_id"].isin(scored_ids)].reset_index(drop=True)
    _repaired(scored, suite_path)
    t_repair = time.perf_counter()
    x = feature_matrix(pl.from_pandas(scored))
    booster = xgb.Booster()
    booster.load_model(str(model_path))
    probability = booster.predict(xgb.DMatrix(x, missing=np.nan, feature_names=booster.feature_names))
    t_predict = time.perf_counter()

    explain = scored["entity_id"].isin(explained_ids).to_numpy()
    contributions = booster.predict(
        xgb.DMatrix(x[explain], missing=np.nan, feature_names=booster.feature_names), pred_contribs=True
    )[:, :-1]
    order = np.argsort(-contributions, axis=1, kind="stable")[:, :top_k]
    top = np.take_along_axis(contributions, order, axis=1)
    reason_codes: list[list[str]] = [[] for _ in range(len(scored))]
    for row, (picked, values) in zip(np.flatnonzero(explain), zip(order, top, strict=True), strict=True):
        chosen = [codes[i] for i, v in zip(picked, values, strict=True) if v > 0]
        reason_codes[row] = chosen or ([no_reason] if no_reason else [])
    t_explain = time.perf_counter()

    out_path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(
        {"entity_id": scored["entity_id"], "probability": probability, "reason_codes": reason_codes}
    ).to_parquet(out_path, index=False)
    t_end = time.perf_counter()

    mine = pd.DataFrame({"entity_id": scored["entity_id"], "probability": probability, "codes": reason_codes})
    joined = mine.merge(published, on="entity_id", validate="one_to_one")
    explained = joined[joined["reason_codes"].map(len) > 0]
    same_codes = int(
        sum(list(a) == list(b) for a, b in zip(explained["codes"], explained["reason_codes"], strict=True))
    )
    margin_probability = 1.0 / (1.0 + np.exp(-joined["raw_margin"].to_numpy()))
    return {
        "rows_read": len(frame),
        "rows_scored": len(scored),
        "rows_explained": int(explain.sum()),
        "gx_expectations": len(validation.results),
        "gx_success": bool(validation.success),
        "same_reason_codes_rows": same_codes,
        "probability_max_abs_diff": float(np.abs(joined["probability"].to_numpy() - margin_probability).max()),
        "setup_s": round(t_oracle - t0, 3),
        "oracle_s": round(oracle_s, 3),
        "read_s": round(t_read - t_start, 3),
        "validate_s": round(t_validate - t_read, 3),
        "repair_s": round(t_repair - t_validate, 3),
        "predict_s": round(t_predict - t_repair, 3),
        "explain_s": round(t_explain - t_predict, 3),
        "write_s": round(t_end - t_explain, 3),
    }


def measured_peer(data: BenchData, *, run_index: int) -> dict:
    suite = Path(__file__).resolve().parents[1] / "expectations" / f"{DEMO_JOB}.json"
    cmd = [
        PYTHON,
        str(Path(__file__).resolve()),
        "--once",
        "--raw-dir",
        str(data.raw_dir),
        "--published-dir",
        str(_published(data)),
        "--suite",
        str(suite),
        "--model-path",
        str(data.model_path),
        "--out",
        str(data.data_dir / "bench-peer" / "scores.parquet"),
    ]
    run = checked(
        measured_child(cmd, env=child_env(data), log_path=data.data_dir / "bench-logs" / f"peer-{run_index}.log"),
        "peer",
    )
    inner = last_json_line(run.stdout)
    # Reading the product's output (what the peer is handed) is no part of the peer's work.
    return {
        "wall_s": round(run.wall_s - inner["oracle_s"], 3),
        "cpu_s": round(run.cpu_s - inner["oracle_s"], 3),
        **inner,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--raw-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--published-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--suite", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--model-path", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    add_data_arguments(parser, rows=1_000_000)
    add_repeat_argument(parser, default=1)
    add_api_argument(parser)
    args = parser.parse_args()
    if args.once:
        print(json.dumps(peer_once(args.raw_dir, args.published_dir, args.suite, args.model_path, args.out)))
        return
    data = data_from_args(args)
    jobs_dir, _ = variant_jobs_dir(args.data_dir.resolve(), VARIANT)
    products: list[dict] = []
    peers: list[dict] = []
    with prefect_api(data, args.api):
        for i in range(args.repeat):
            products.append(measured_e2e(data, variant=VARIANT, jobs_dir=jobs_dir, chunk_rows=None, run_index=i))
            print(f"round {i + 1}/{args.repeat}: product {products[-1]['wall_s']:.2f} s", file=sys.stderr, flush=True)
            peers.append(measured_peer(data, run_index=i))
            print(f"round {i + 1}/{args.repeat}: peer {peers[-1]['wall_s']:.2f} s", file=sys.stderr, flush=True)
    product_wall, peer_wall = median([r["wall_s"] for r in products]), median([r["wall_s"] for r in peers])
    product_cpu, peer_cpu = median([r["cpu_s"] for r in products]), median([r["cpu_s"] for r in peers])
    last = peers[-1]
    figure = {
        "bench": "peer",
        "rows": data.rows,
        "repeat": args.repeat,
        "product_wall_s": product_wall,
        "peer_wall_s": peer_wall,
        "peer_over_product": round(peer_wall / product_wall, 2),
        "peer_over_product_cpu": round(peer_cpu / product_cpu, 2),
        "goal": GOAL,
        "rows_explained": last["rows_explained"],
        "same_reason_codes_rows": last["same_reason_codes_rows"],
        "probability_max_abs_diff": last["probability_max_abs_diff"],
        "product_runs": products,
        "peer_runs": peers,
    }
    emit(figure)
    print_table(
        f"peer vs product, {data.rows:,} rows (goal peer ≥ {GOAL:g}× the product)",
        ["run", "wall s", "cpu s", "× product", "explained", "same codes"],
        [
            ["product (score run)", product_wall, product_cpu, "1.00", products[-1]["rows_with_reasons"], "-"],
            [
                "peer (pandas + GX + pred_contribs)",
                peer_wall,
                peer_cpu,
                figure["peer_over_product"],
                last["rows_explained"],
                last["same_reason_codes_rows"],
            ],
        ],
    )
    print(
        "peer stages (s): "
        + ", ".join(
            f"{k[:-2]} {last[k]}"
            for k in ("setup_s", "read_s", "validate_s", "repair_s", "predict_s", "explain_s", "write_s")
        ),
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
