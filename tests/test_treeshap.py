"""The table TreeSHAP kernel: exact against XGBoost's `pred_contribs`, its load-time guard, the
models it leaves to XGBoost, and the near-tie recompute that keeps top-k reasons XGBoost's.

Models are small ones trained here (or one tree written by hand, for exact ties); engines are
built from a tmp registry holding them.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import xgboost as xgb

from tasks.contracts import InferenceInput
from tasks.inference import treeshap
from tasks.inference.engine import XGBoostEngine
from tasks.inference.registry import inference_model_artifact, inference_model_checksum
from tasks.inference.treeshap import (
    GUARD_TOLERANCE,
    TreeShapUnsupported,
    inference_checked_treeshap,
    inference_guard_rows,
    inference_near_tie_rows,
    inference_treeshap_kernel,
    inference_treeshap_max_diff,
)

N_FEATURES = 10
FEATURES = [f"f{i}" for i in range(N_FEATURES)]


def training_data(rows: int = 2000, *, seed: int = 0, missing: float = 0.15) -> tuple[np.ndarray, np.ndarray]:
    """Features with NaNs, and a label that needs interactions (so trees reuse features on a path)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, N_FEATURES)).astype(np.float32)
    x[:, 3] = np.round(x[:, 3] * 2)  # few distinct values: splits land exactly on data values
    x[rng.random(x.shape) < missing] = np.nan
    z = np.nan_to_num(x)
    signal = z[:, 0] + z[:, 1] * z[:, 2] - 0.5 * np.abs(z[:, 3]) + np.where(np.isnan(x[:, 4]), 1.0, z[:, 4])
    y = (signal + rng.normal(size=rows) > 0).astype(np.float64)
    return x, y


def trained(depth: int, trees: int, *, objective: str = "binary:logistic", seed: int = 0, **params) -> xgb.Booster:
    x, y = training_data(seed=seed)
    if objective == "reg:squarederror":
        y = y * 3.0 + np.nan_to_num(x[:, 5])
    elif objective == "count:poisson":
        y = np.round(y * 3.0 + np.abs(np.nan_to_num(x[:, 5])))
    matrix = xgb.DMatrix(x, label=y, missing=np.nan, feature_names=FEATURES)
    return xgb.train(
        {"objective": objective, "max_depth": depth, "eta": 0.1, "nthread": 2, "seed": seed, **params},
        matrix,
        num_boost_round=trees,
    )


def pred_contribs(booster: xgb.Booster, rows: np.ndarray) -> np.ndarray:
    matrix = xgb.DMatrix(rows, missing=np.nan, feature_names=FEATURES)
    return np.asarray(booster.predict(matrix, pred_contribs=True), dtype=np.float64)


def random_rows(rows: int = 300, seed: int = 11) -> np.ndarray:
    x, _ = training_data(rows, seed=seed, missing=0.2)
    return x


def registry_with(
    root: Path, booster: xgb.Booster, *, name: str = "treeshap_model", features: list[str] = FEATURES
) -> Path:
    """`root/name/1/` holding the booster as `model.json` and its metadata; returns the registry dir."""
    directory = root / name / "1"
    directory.mkdir(parents=True)
    booster.save_model(str(directory / "model.json"))
    meta = {
        "name": name,
        "version": "1",
        "framework": "xgboost",
        "model_file": "model.json",
        "sha256": inference_model_checksum(directory / "model.json"),
        "feature_version": "test-1",
        "features": features,
        "feature_dtypes": {f: "float32" for f in features},
    }
    (directory / "metadata.json").write_text(json.dumps(meta))
    return root / name


def engine_for(tmp_path: Path, booster: xgb.Booster, **kwargs) -> XGBoostEngine:
    return XGBoostEngine(inference_model_artifact(registry_with(tmp_path, booster)), nthread=2, **kwargs)


def batch_of(rows: np.ndarray) -> InferenceInput:
    return InferenceInput(
        chunk_id=0,
        entity_ids=pa.array([f"E{i}" for i in range(rows.shape[0])]),
        features=np.ascontiguousarray(rows, dtype=np.float32),
        feature_names=tuple(f"f{i}" for i in range(rows.shape[1])),
    )


# --- the kernel equals pred_contribs ----------------------------------------------------------


@pytest.mark.parametrize(
    ("depth", "trees", "objective", "params"),
    [
        (2, 1, "binary:logistic", {}),
        (2, 300, "binary:logistic", {"base_score": 0.3}),
        (4, 50, "binary:logistic", {"subsample": 0.8, "colsample_bytree": 0.8}),
        (6, 300, "binary:logistic", {}),
        (8, 1, "binary:logistic", {"base_score": 0.7}),
        (8, 50, "binary:logistic", {}),
        (4, 50, "reg:squarederror", {"base_score": 2.5}),
        (6, 50, "reg:squarederror", {}),
        (4, 50, "count:poisson", {}),
        (3, 5, "binary:logistic", {"gamma": 1e6}),  # no split pays: every tree is a single leaf
    ],
)
def test_kernel_equals_pred_contribs(depth: int, trees: int, objective: str, params: dict) -> None:
    booster = trained(depth, trees, objective=objective, **params)
    kernel = inference_treeshap_kernel(booster.save_raw("json"))
    assert kernel.n_trees == trees
    # Paths that split twice on a feature have fewer distinct features than the depth.
    assert kernel.widest_path == 0 if params.get("gamma") else 0 < kernel.widest_path <= depth
    rows = np.vstack([random_rows(), inference_guard_rows(kernel, seed=5)])
    assert np.isnan(rows).any()
    ours = kernel.contributions(rows, nthread=2)
    reference = pred_contribs(booster, rows)
    assert ours.shape == reference.shape == (rows.shape[0], N_FEATURES + 1)
    assert ours.dtype == np.float64
    np.testing.assert_allclose(ours, reference, rtol=0, atol=GUARD_TOLERANCE)
    # The bias column is the same for every row: the base margin plus each tree's expected value.
    assert np.all(ours[:, -1] == ours[0, -1])
    margins = booster.predict(xgb.DMatrix(rows, missing=np.nan, feature_names=FEATURES), output_margin=True)
    np.testing.assert_allclose(ours.sum(axis=1), margins, rtol=0, atol=1e-4)


def test_kernel_answers_any_number_of_rows_and_threads() -> None:
    booster = trained(4, 20)
    kernel = inference_treeshap_kernel(booster.save_raw("json"))
    rows = random_rows(1500)
    everything = kernel.contributions(rows, nthread=2)
    np.testing.assert_array_equal(kernel.contributions(rows, nthread=1), everything)
    np.testing.assert_array_equal(kernel.contributions(rows[7:8]), everything[7:8])
    assert kernel.contributions(rows[:0]).shape == (0, N_FEATURES + 1)
    with pytest.raises(ValueError, match="10 features"):
        kernel.contributions(rows[:, :4])


def test_kernel_reads_ubj_models_the_same(tmp_path: Path) -> None:
    booster = trained(4, 30)
    booster.save_model(str(tmp_path / "model.ubj"))
    reloaded = xgb.Booster(model_file=str(tmp_path / "model.ubj"))
    rows = random_rows()
    np.testing.assert_array_equal(
        inference_treeshap_kernel(reloaded.save_raw("json")).contributions(rows),
        inference_treeshap_kernel(booster.save_raw("json")).contributions(rows),
    )


@pytest.mark.parametrize(
    ("depth", "trees", "params"),
    [
        (6, 40, {}),
        # Ten features at depth 8: most paths split twice or more on one feature (a repeated slot inside a group).
        (8, 20, {}),
        (0, 20, {"grow_policy": "lossguide", "max_leaves": 31}),
    ],
    ids=["depth6", "depth8-repeats", "lossguide"],
)
def test_subtree_tables_are_the_leaf_tables_summed(depth: int, trees: int, params: dict) -> None:
    booster = trained(depth, trees, **params)
    model = booster.save_raw("json")
    rows = random_rows(2000, seed=5)
    by_leaf = inference_treeshap_kernel(model, group_bits=0)
    assert np.diff(by_leaf.group_node_start).max() == 0  # every group a single leaf: the per-leaf tables
    reference = pred_contribs(booster, rows)
    for bits in (3, 8, 12):
        kernel = inference_treeshap_kernel(model, group_bits=bits)
        assert kernel.group_root.size < by_leaf.group_root.size  # subtrees were merged
        assert (
            int((kernel.group_width + np.diff(kernel.group_node_start))[np.diff(kernel.group_node_start) > 0].max())
            <= bits
        )
        ours = kernel.contributions(rows)
        # The same leaf entries, summed in another order: equal to float64 rounding, and XGBoost's to its float32.
        np.testing.assert_allclose(ours, by_leaf.contributions(rows), rtol=0, atol=1e-12)
        assert inference_treeshap_max_diff(kernel, lambda r: reference, rows) <= GUARD_TOLERANCE
        per_tree = sum(kernel.tree_kernel(t).contributions(rows[:50]) for t in range(kernel.n_trees))
        np.testing.assert_allclose(per_tree[:, :-1], ours[:50, :-1], rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="group_bits"):
        inference_treeshap_kernel(model, group_bits=17)


# --- guard 1: the load-time check against XGBoost ---------------------------------------------


def first_group(kernel: treeshap.TreeShapKernel) -> tuple[int, int, int]:
    """The first group with a feature: its table's offset, its entries and its number of features."""
    widths = np.diff(kernel.group_feature_start)
    group = int(np.flatnonzero(widths > 0)[0])
    bits = int(kernel.group_width[group]) + int(np.diff(kernel.group_node_start)[group])
    return int(kernel.group_offset[group]), int(widths[group]) << bits, int(widths[group])


def corrupted(kernel: treeshap.TreeShapKernel) -> treeshap.TreeShapKernel:
    """The kernel with the table of one group (a subtree or leaf) of the first tree off by 1e-3 everywhere."""
    start, size, _ = first_group(kernel)
    kernel.table[start : start + size] += 1e-3
    return kernel


def test_guard_measures_a_corrupted_table() -> None:
    booster = trained(4, 50)
    kernel = inference_treeshap_kernel(booster.save_raw("json"))
    rows = inference_guard_rows(kernel)
    assert rows.shape == (256, N_FEATURES) and np.isnan(rows).any()
    reference = lambda r: pred_contribs(booster, r)  # noqa: E731
    assert inference_treeshap_max_diff(kernel, reference, rows) <= GUARD_TOLERANCE
    assert inference_treeshap_max_diff(corrupted(kernel), reference, rows) > 5e-4


def test_guard_measures_a_single_wrong_entry() -> None:
    booster = trained(4, 50)
    kernel = inference_treeshap_kernel(booster.save_raw("json"))
    rows = inference_guard_rows(kernel)
    before = kernel.contributions(rows[:1])
    # Find the one entry the first guard row reads for the first feature of the first tree's first group.
    start, size, width = first_group(kernel)
    feature = kernel.group_feature[kernel.group_feature_start[np.flatnonzero(np.diff(kernel.group_feature_start))[0]]]
    read = None
    for at in range(start, start + size, width):
        kernel.table[at] += 1.0
        moved = kernel.contributions(rows[:1])[0, feature] != before[0, feature]
        kernel.table[at] -= 1.0
        if moved:
            read = at
            break
    assert read is not None
    clean = kernel.contributions(rows)
    kernel.table[read] += 1e-4
    reference = pred_contribs(booster, rows)
    diff = inference_treeshap_max_diff(kernel, lambda r: reference, rows)
    # The rows that read the entry are off by 1e-4, measured against their own magnitude where that is above 1.
    readers = (kernel.contributions(rows) != clean).any(axis=1)
    scale = np.maximum(1.0, np.abs(reference[readers]).max(axis=1))
    assert readers[0] and diff == pytest.approx(float((1e-4 / scale).max()), rel=0.1)


def test_a_kernel_that_disagrees_is_refused_logged_and_xgboost_explains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    booster = trained(4, 50)
    build = treeshap.inference_treeshap_kernel
    monkeypatch.setattr(treeshap, "inference_treeshap_kernel", lambda *a, **k: corrupted(build(*a, **k)))
    caplog.set_level(logging.INFO, logger="scoring.inference")
    engine = engine_for(tmp_path, booster)
    assert engine.contributions_kernel == "xgboost"
    assert "max_abs_diff" in engine.contributions_kernel_reason
    assert engine.contributions_kernel_max_abs_diff > GUARD_TOLERANCE
    (line,) = [r for r in caplog.records if r.name == "scoring.inference" and r.levelno == logging.WARNING]
    assert (
        "[INF]" in line.getMessage()
        and "treeshap_model 1" in line.getMessage()
        and "max_abs_diff=" in line.getMessage()
    )
    rows = random_rows(50)
    out = engine.inference_contributions(batch_of(rows), np.arange(50), top_k=3)
    np.testing.assert_array_equal(out.values, pred_contribs(booster, rows)[:, :-1])
    assert (engine.contributions_counts.kernel_rows, engine.contributions_counts.framework_rows) == (0, 50)


def test_checked_kernel_is_kept_when_it_agrees(caplog: pytest.LogCaptureFixture) -> None:
    booster = trained(4, 50)
    caplog.set_level(logging.INFO, logger="scoring.inference")
    choice = inference_checked_treeshap(
        booster.save_raw("json"), lambda r: pred_contribs(booster, r), model_label="m 1"
    )
    assert choice.name == "table_treeshap" and choice.reason is None
    assert choice.max_abs_diff <= GUARD_TOLERANCE and choice.load_s > 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_failing_reference_means_xgboost_explains(caplog: pytest.LogCaptureFixture) -> None:
    booster = trained(2, 5)

    def broken(rows: np.ndarray) -> np.ndarray:
        raise RuntimeError("no contributions today")

    choice = inference_checked_treeshap(booster.save_raw("json"), broken, model_label="m 1")
    assert choice.kernel is None and "no contributions today" in choice.reason


# --- guard 2: models the kernel leaves to XGBoost ----------------------------------------------


def categorical_booster() -> xgb.Booster:
    rng = np.random.default_rng(2)
    x = np.column_stack([rng.integers(0, 6, 800), rng.normal(size=800)]).astype(np.float32)
    y = (np.isin(x[:, 0], [1, 3, 4]) ^ (x[:, 1] > 0)).astype(np.float64)
    matrix = xgb.DMatrix(x, label=y, feature_types=["c", "q"], enable_categorical=True, feature_names=["f0", "f1"])
    params = {
        "objective": "binary:logistic",
        "max_depth": 3,
        "max_cat_to_onehot": 1,
        "tree_method": "hist",
        "nthread": 2,
    }
    return xgb.train(params, matrix, num_boost_round=5)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (categorical_booster, "categorical"),
        (lambda: trained(3, 5, objective="multi:softprob", num_class=3), "single-output"),
        (lambda: trained(3, 5, booster="gblinear"), "gblinear"),
        (lambda: trained(3, 5, booster="dart", rate_drop=0.1), "dart"),
        (lambda: trained(3, 5, objective="reg:pseudohubererror", base_score=0.5), None),
        (lambda: trained(3, 5, objective="binary:hinge"), None),
    ],
    ids=["categorical", "multiclass", "gblinear", "dart", "pseudohuber", "hinge"],
)
def test_unsupported_models_are_left_to_xgboost(make, reason: str | None) -> None:
    booster = make()
    if reason is None:
        # Objectives the kernel knows: it must then agree with XGBoost, bias included.
        kernel = inference_treeshap_kernel(booster.save_raw("json"))
        rows = random_rows()
        np.testing.assert_allclose(
            kernel.contributions(rows), pred_contribs(booster, rows), rtol=0, atol=GUARD_TOLERANCE
        )
        return
    with pytest.raises(TreeShapUnsupported, match=reason):
        inference_treeshap_kernel(booster.save_raw("json"))


@pytest.mark.parametrize(
    ("objective", "extra"),
    [
        ("binary:logitraw", {}),
        ("reg:logistic", {}),
        ("reg:gamma", {}),
        ("reg:tweedie", {}),
        ("survival:cox", {}),
        ("reg:absoluteerror", {}),
        ("reg:quantileerror", {"quantile_alpha": 0.3}),
        ("reg:squaredlogerror", {}),
    ],
)
def test_every_known_objective_gets_xgboosts_bias(objective: str, extra: dict) -> None:
    x, label = training_data(800, seed=3)
    y = label if objective in ("binary:logitraw", "reg:logistic") else label * 2 + np.abs(np.nan_to_num(x[:, 5])) + 0.1
    matrix = xgb.DMatrix(x, label=y, missing=np.nan, feature_names=FEATURES)
    booster = xgb.train({"objective": objective, "max_depth": 3, "nthread": 2, **extra}, matrix, num_boost_round=5)
    rows = random_rows(100)
    np.testing.assert_allclose(
        inference_treeshap_kernel(booster.save_raw("json")).contributions(rows),
        pred_contribs(booster, rows),
        rtol=0,
        atol=GUARD_TOLERANCE,
    )


def test_an_unknown_objective_is_left_to_xgboost() -> None:
    model = json.loads(trained(2, 3).save_raw("json"))
    model["learner"]["objective"]["name"] = "reg:somethingnew"
    with pytest.raises(TreeShapUnsupported, match="reg:somethingnew"):
        inference_treeshap_kernel(model)


def test_categorical_model_engine_explains_with_xgboost(tmp_path: Path) -> None:
    booster = categorical_booster()
    engine = XGBoostEngine(inference_model_artifact(registry_with(tmp_path, booster, features=["f0", "f1"])), nthread=2)
    assert engine.contributions_kernel == "xgboost"
    assert "categorical" in engine.contributions_kernel_reason


def test_paths_wider_than_the_cap_are_left_to_xgboost(tmp_path: Path) -> None:
    booster = trained(6, 30)
    widest = inference_treeshap_kernel(booster.save_raw("json")).widest_path
    assert widest > 3
    with pytest.raises(TreeShapUnsupported, match=f"{widest} distinct features, over the table cap of 3"):
        inference_treeshap_kernel(booster.save_raw("json"), max_path_features=3)
    with pytest.raises(TreeShapUnsupported, match="MiB, over the cap"):
        inference_treeshap_kernel(booster.save_raw("json"), max_table_bytes=10_000)
    engine = engine_for(tmp_path, booster, max_path_features=3)
    assert engine.contributions_kernel == "xgboost" and "table cap of 3" in engine.contributions_kernel_reason
    rows = random_rows(40)
    out = engine.inference_contributions(batch_of(rows), np.arange(40))
    np.testing.assert_array_equal(out.values, pred_contribs(booster, rows)[:, :-1])


# --- guard 3: near ties go to XGBoost ----------------------------------------------------------


def test_near_tie_rows_follow_the_reason_ranking() -> None:
    tol = 1e-5
    values = np.array(
        [
            [0.50, 0.30, 0.10, 0.00],  # clear order
            [0.50, 0.30, 0.30 + 5e-6, 0.0],  # 2nd/3rd within tol
            [0.50, 0.30, 0.10, 0.10 - 5e-6],  # 3rd/4th (k, k+1) within tol
            [0.50, 3e-6, -0.2, -0.3],  # a top-k value whose sign is noise
            [-0.1, -0.1, -0.1, -0.1],  # nothing pushes towards the event: no reason either way
            [0.50, 0.0, 0.0, 0.0],  # exact zeros of features no tree splits on
            [0.50, 0.20, 0.10, 0.10 - 5e-6],  # k=2: the tie is below the top-k+1 boundary... of k=3 only
        ]
    )
    exact = np.array([False, False, False, False])
    flagged = inference_near_tie_rows(values, 3, exact=exact, tolerance=tol)
    assert flagged.tolist() == [False, True, True, True, False, True, True]
    exact_last_three = np.array([False, True, True, True])
    assert inference_near_tie_rows(values[5:6], 3, exact=exact_last_three, tolerance=tol).tolist() == [False]
    assert inference_near_tie_rows(values[6:7], 2, exact=exact, tolerance=tol).tolist() == [False]
    assert inference_near_tie_rows(values[:0], 3, tolerance=tol).shape == (0,)


def ranked_near_ties(values, top_k, exact, tolerance, by_size):  # noqa: ANN001, ANN201
    """The tie test written out with a full stable sort of every row: the reference the kernel must equal."""
    values = np.abs(values) if by_size else values
    ranks = min(top_k + 1, values.shape[1])
    order = np.argsort(-values, axis=1, kind="stable")[:, :ranks]
    ranked, ranked_exact = np.take_along_axis(values, order, axis=1), exact[order]
    flagged = np.zeros(values.shape[0], dtype=bool)
    for j in range(min(top_k, values.shape[1])):
        may_be_positive = ranked[:, j] > -tolerance
        flagged |= may_be_positive & (np.abs(ranked[:, j]) < tolerance) & ~ranked_exact[:, j]
        if j + 1 < ranks:
            close = ranked[:, j] - ranked[:, j + 1] < tolerance
            flagged |= may_be_positive & close & ~(ranked_exact[:, j] & ranked_exact[:, j + 1])
    return flagged


@pytest.mark.parametrize("by_size", [False, True])
def test_near_tie_rows_equal_a_full_sort_on_rows_full_of_ties(by_size: bool) -> None:
    rng = np.random.default_rng(4)
    outcomes = 0
    for features in (1, 2, 5, 20):
        # Few distinct values (equal ones, both zeros, near-equal ones) so the ranking's order among equals and
        # the exact features' pairing decide many rows.
        values = rng.integers(-3, 4, size=(4000, features)) * 0.1 + rng.choice([0.0, 4e-6, 3e-5], (4000, features))
        values[rng.random(values.shape) < 0.1] = -0.0
        exact = rng.random(features) < 0.3
        values[:, exact] = 0.0
        tolerance = rng.choice([1e-5, 2e-5, 5e-5], 4000)
        for top_k in (1, 3, features + 1):
            expected = ranked_near_ties(values, top_k, exact, tolerance, by_size)
            outcomes += int(0 < expected.sum() < expected.size)
            got = inference_near_tie_rows(values, top_k, exact=exact, tolerance=tolerance, by_size=by_size)
            np.testing.assert_array_equal(got, expected)
            # A view of a wider array (the kernel's contributions without their bias column), as the engine passes it.
            wide = np.hstack([values, np.ones((4000, 1))])[:, :-1]
            np.testing.assert_array_equal(
                inference_near_tie_rows(wide, top_k, exact=exact, tolerance=tolerance, by_size=by_size), expected
            )
    assert outcomes >= 6  # most cases flag some rows and not others


def symmetric_booster() -> xgb.Booster:
    """One tree, f(x0, x1) symmetric in x0 and x1 with equal covers: at (x0 >= 0, x1 >= 0) both get the
    same contribution, so the first and second reason are an exact tie."""
    model = json.loads(trained(2, 1).save_raw("json"))
    tree = model["learner"]["gradient_booster"]["model"]["trees"][0]
    leaves = [-1.0, 0.25, 0.25, 1.0]
    tree.update(
        left_children=[1, 3, 5, -1, -1, -1, -1],
        right_children=[2, 4, 6, -1, -1, -1, -1],
        parents=[2147483647, 0, 0, 1, 1, 2, 2],
        split_indices=[0, 1, 1, 0, 0, 0, 0],
        split_conditions=[0.0, 0.0, 0.0, *leaves],
        split_type=[0] * 7,
        default_left=[1, 1, 1, 0, 0, 0, 0],
        sum_hessian=[400.0, 200.0, 200.0, 100.0, 100.0, 100.0, 100.0],
        base_weights=[0.0, 0.0, 0.0, *leaves],
        loss_changes=[1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0],
    )
    tree["tree_param"]["num_nodes"] = "7"
    tree["tree_param"]["num_deleted"] = "0"
    booster = xgb.Booster()
    booster.load_model(bytearray(json.dumps(model).encode()))
    return booster


def test_near_ties_are_recomputed_by_xgboost(tmp_path: Path) -> None:
    booster = symmetric_booster()
    engine = engine_for(tmp_path, booster)
    assert engine.contributions_kernel == "table_treeshap"
    rows = np.random.default_rng(4).normal(size=(400, N_FEATURES)).astype(np.float32)
    tied = (rows[:, 0] >= 0) & (rows[:, 1] >= 0)
    reference = pred_contribs(booster, rows)[:, :-1]
    assert np.all(reference[tied, 0] > 0) and np.allclose(reference[tied, 0], reference[tied, 1], rtol=0, atol=1e-7)

    plain = engine.inference_contributions(batch_of(rows), np.arange(400))
    assert engine.contributions_counts.tie_recomputed_rows == 0
    np.testing.assert_allclose(plain.values, reference, rtol=0, atol=GUARD_TOLERANCE)

    out = engine.inference_contributions(batch_of(rows), np.arange(400), top_k=1)
    counts = engine.contributions_counts
    assert counts.tie_recomputed_rows == int(tied.sum()) > 0
    assert counts.kernel_rows == 800 and counts.framework_rows == 0
    np.testing.assert_array_equal(out.values[tied], reference[tied])
    np.testing.assert_allclose(out.values[~tied], reference[~tied], rtol=0, atol=GUARD_TOLERANCE)


# --- the engine -------------------------------------------------------------------------------


def test_engine_explains_with_the_kernel_and_keeps_xgboosts_top_k(tmp_path: Path) -> None:
    booster = trained(4, 100, base_score=0.4)
    engine = engine_for(tmp_path, booster)
    assert (engine.contributions_kernel, engine.contributions_kernel_reason) == ("table_treeshap", None)
    assert engine.contributions_kernel_max_abs_diff <= GUARD_TOLERANCE
    rows = random_rows(2000, seed=21)
    picked = np.arange(0, 2000, 3)
    out = engine.inference_contributions(batch_of(rows), picked, top_k=3)
    assert out.values.shape == (picked.size, N_FEATURES) and out.values.dtype == np.float64
    np.testing.assert_array_equal(out.row_index, picked)
    reference = pred_contribs(booster, rows[picked])[:, :-1]
    np.testing.assert_allclose(out.values, reference, rtol=0, atol=GUARD_TOLERANCE)
    ranked = lambda v: np.argsort(-v, axis=1, kind="stable")[:, :3]  # noqa: E731
    np.testing.assert_array_equal(ranked(out.values), ranked(reference))
    assert engine.contributions_counts.kernel_rows == picked.size
    empty = engine.inference_contributions(batch_of(rows), np.array([], dtype=np.int64), top_k=3)
    assert empty.values.shape == (0, N_FEATURES)
