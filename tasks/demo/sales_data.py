"""Seeded generator of daily unit sales per store and item, with actuals that land the next morning.

A row is one store's item on one day: its category, the store's format, the calendar, the shelf
price against the item's regular price, whether it is on promotion, the store's weather, and the
item's trailing 28-day mean as the upstream sales system reports it. `units_sold` is drawn from a
negative binomial (a gamma-mixed Poisson) around `sales_log_mean`, a known demand function; its
overdispersion is larger where demand is harder to foresee (a promotion's uptake, ice cream and
drinks on a hot day), so the error of a good forecast depends on the row and an error model has
something to learn.

The last `shift_days` days of a generated range are a heat wave during a summer promotion
campaign: temperatures above anything the training days saw, where drinks and ice cream sell
far more than the trend of milder days says, and many more, deeper promotions, whose uptake is
the noisiest part of demand. A model trained on the other days errs more there, and rows move to
where its error model expects larger errors.

The assortment (stores, items, their traits) comes from `seed` alone and each day from (`seed`,
date), so a date's rows do not depend on which other dates are generated.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

ENTITY_COLUMN = "store_item"
OUTCOME_COLUMN = "units_sold"
STORES = 20
MAX_ITEMS = 9999
"""Item ids have four digits (S07-I0123), so a day has at most STORES × MAX_ITEMS rows."""
STORE_FORMATS = ("city", "suburb", "rural")
FORMAT_LEVEL = {"city": 1.4, "suburb": 1.0, "rural": 0.6}
CATEGORIES = ("beverages", "ice_cream", "produce", "dairy", "bakery", "snacks", "household")
CATEGORY_LEVEL = {
    "beverages": 1.5,
    "ice_cream": 0.6,
    "produce": 2.0,
    "dairy": 1.8,
    "bakery": 1.5,
    "snacks": 1.0,
    "household": 0.5,
}
CATEGORY_SHARE = (0.16, 0.08, 0.18, 0.16, 0.12, 0.16, 0.14)
REGULAR_PRICE_EUR = {
    "beverages": 1.8,
    "ice_cream": 3.5,
    "produce": 2.2,
    "dairy": 1.6,
    "bakery": 2.4,
    "snacks": 2.0,
    "household": 4.5,
}
DAY_NAMES = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
DAY_EFFECT = np.array([-0.10, -0.12, -0.08, -0.03, 0.10, 0.25, 0.05])
"""Log-demand change by weekday (Monday first): Saturday is the big shopping day."""

TEMPERATURE_SLOPE = {
    "beverages": 0.03,
    "ice_cream": 0.06,
    "produce": 0.01,
    "dairy": 0.0,
    "bakery": -0.01,
    "snacks": 0.01,
    "household": 0.0,
}
"""Log-demand change per °C above 15 °C."""
HEAT_THRESHOLD_C = 25.0
HEAT_SLOPE = {
    "beverages": 0.05,
    "ice_cream": 0.08,
    "produce": 0.0,
    "dairy": 0.0,
    "bakery": -0.02,
    "snacks": 0.0,
    "household": 0.0,
}
"""Further log-demand change per °C above HEAT_THRESHOLD_C: real heat sells drinks and ice cream
faster than the trend of milder days says, and only heat-wave days reach it."""
PROMOTION_UPLIFT = {
    "beverages": 0.5,
    "ice_cream": 0.6,
    "produce": 0.3,
    "dairy": 0.3,
    "bakery": 0.25,
    "snacks": 0.7,
    "household": 0.4,
}
PRICE_ELASTICITY = -1.5
RAIN_EFFECT_PER_MM = {"city": -0.025, "suburb": -0.02, "rural": -0.01}
"""Rain keeps shoppers home, city shoppers (who walk) most."""

DISPERSION = 12.0
PROMOTION_DISPERSION = 2.0
HEAT_DISPERSION = 3.0
"""Negative-binomial shape k (variance μ + μ²/k): small k is noisy demand. A promotion's uptake
and a hot day's drinks and ice cream are the hard rows."""

NORMAL_WEATHER = (13.0, 3.5, 3.0, 21.0)
"""Regional daily maximum temperature, °C: mean, day-to-day spread, and the range it stays in. Each
store adds its own ±1.5 °C at most, so days outside the heat wave stay below HEAT_THRESHOLD_C."""
HEAT_WAVE = (30.0, 2.5)
"""The heat wave's regional daily maximum, °C: mean and spread."""
PROMOTION_SHARE = 0.12
CAMPAIGN_PROMOTION_SHARE = 0.45
RAIN_CHANCE, HEAT_WAVE_RAIN_CHANCE = 0.35, 0.10
REGIONS = 3

DIRTY_RATES: dict[str, float] = {
    "temperature_missing": 0.004,
    "price_index_missing": 0.003,
    "units_28d_avg_missing": 0.01,
    "store_item_blank": 0.001,
}
"""Share of rows per kind of dirt, independently per row: a weather feed gap, a price the pricing
system did not send, a new listing without a 28-day history, an id lost upstream."""


@dataclass(frozen=True)
class SalesDayPlan:
    date: dt.date
    rows: int
    shifted: bool


@dataclass(frozen=True)
class Assortment:
    """The store × item rows of every day, in a fixed order, with their lasting traits."""

    store_item: np.ndarray
    store: np.ndarray
    store_format: np.ndarray
    region_of_store: np.ndarray
    """Store s (S01 is 0) lies in region region_of_store[s], whose weather it shares."""
    category: np.ndarray
    regular_price: np.ndarray
    base_units: np.ndarray
    """The row's typical daily units before calendar, price, promotion and weather."""


def assortment(rows: int, *, seed: int) -> Assortment:
    """`rows` store-items: row r is store r mod STORES, item r div STORES (stores carry the same items)."""
    if not 0 < rows <= STORES * MAX_ITEMS:
        raise ValueError(
            f"a demo sales day has 1 to {STORES * MAX_ITEMS:,} rows ({STORES} stores × {MAX_ITEMS} items), got {rows:,}"
        )
    rng = np.random.default_rng([seed, 0])
    store_of = np.arange(rows) % STORES
    item_of = np.arange(rows) // STORES
    items = int(item_of.max()) + 1
    formats = rng.choice(STORE_FORMATS, STORES, p=[0.4, 0.4, 0.2])
    regions = rng.integers(0, REGIONS, STORES)
    item_category = rng.choice(CATEGORIES, items, p=CATEGORY_SHARE)
    item_popularity = rng.lognormal(np.log(3.0), 0.9, items)
    item_price = np.array([REGULAR_PRICE_EUR[c] for c in item_category]) * rng.lognormal(0.0, 0.3, items)
    category = item_category[item_of]
    store_format = formats[store_of]
    base = (
        item_popularity[item_of]
        * np.array([FORMAT_LEVEL[f] for f in store_format])
        * np.array([CATEGORY_LEVEL[c] for c in category])
        * rng.lognormal(0.0, 0.3, rows)
    )
    return Assortment(
        store_item=np.array([f"S{s + 1:02d}-I{i + 1:04d}" for s, i in zip(store_of, item_of, strict=True)]),
        store=np.array([f"S{s + 1:02d}" for s in range(STORES)])[store_of],
        store_format=store_format,
        region_of_store=regions,
        category=category,
        regular_price=np.round(item_price[item_of], 2),
        base_units=base,
    )


def _values_of(mapping: dict[str, float], keys: np.ndarray) -> np.ndarray:
    """`mapping`'s value of each key."""
    return np.vectorize(mapping.__getitem__, otypes=[float])(keys)


def sales_log_mean(frame: pl.DataFrame, base_units: np.ndarray) -> np.ndarray:
    """log E[units_sold] of each (clean) row: the known demand function."""
    category = frame["category"].to_numpy()
    heat = np.maximum(frame["temperature_c"].to_numpy() - HEAT_THRESHOLD_C, 0.0)
    return (
        np.log(base_units)
        + _values_of(dict(zip(DAY_NAMES, DAY_EFFECT, strict=True)), frame["day_of_week"].to_numpy())
        + _values_of(PROMOTION_UPLIFT, category) * frame["promotion"].to_numpy()
        + PRICE_ELASTICITY * np.log(frame["price_index"].to_numpy())
        + _values_of(TEMPERATURE_SLOPE, category) * (frame["temperature_c"].to_numpy() - 15.0)
        + _values_of(HEAT_SLOPE, category) * heat
        + _values_of(RAIN_EFFECT_PER_MM, frame["store_format"].to_numpy()) * frame["rain_mm"].to_numpy()
    )


def sales_dispersion(frame: pl.DataFrame) -> np.ndarray:
    """The negative-binomial shape k of each (clean) row: smaller where demand is harder to foresee."""
    hot_item = frame["category"].is_in(["beverages", "ice_cream"]).to_numpy() & (
        frame["temperature_c"].to_numpy() > HEAT_THRESHOLD_C
    )
    return np.where(
        frame["promotion"].to_numpy(), PROMOTION_DISPERSION, np.where(hot_item, HEAT_DISPERSION, DISPERSION)
    )


def _clean_day(rng: np.random.Generator, plan: SalesDayPlan, shop: Assortment) -> pl.DataFrame:
    n = plan.rows
    mean, spread, low, high = NORMAL_WEATHER
    regional = (
        rng.normal(*HEAT_WAVE, REGIONS) if plan.shifted else np.clip(rng.normal(mean, spread, REGIONS), low, high)
    )
    store_temperature = regional[shop.region_of_store] + rng.uniform(-1.5, 1.5, STORES)
    raining = rng.random(STORES) < (HEAT_WAVE_RAIN_CHANCE if plan.shifted else RAIN_CHANCE)
    store_rain = np.where(raining, np.minimum(rng.exponential(6.0, STORES), 40.0), 0.0)
    store_of = np.arange(n) % STORES
    promotion = rng.random(n) < (CAMPAIGN_PROMOTION_SHARE if plan.shifted else PROMOTION_SHARE)
    # Promotions take 10-30 % off (the campaign 25-40 %); a few other items are marked down a little
    # or priced above their regular price for a while.
    discount = np.where(plan.shifted, rng.uniform(0.25, 0.40, n), rng.choice([0.10, 0.20, 0.30], n))
    other = rng.random(n)
    price_index = np.where(
        promotion,
        1.0 - discount,
        np.where(other < 0.05, rng.uniform(0.85, 0.95, n), np.where(other > 0.92, rng.uniform(1.05, 1.15, n), 1.0)),
    )
    price_index = np.round(price_index, 2)
    return pl.DataFrame(
        {
            ENTITY_COLUMN: shop.store_item,
            "sales_date": [plan.date] * n,
            "store": shop.store,
            "store_format": shop.store_format,
            "category": shop.category,
            "day_of_week": [DAY_NAMES[plan.date.weekday()]] * n,
            "price": np.round(shop.regular_price * price_index, 2),
            "price_index": price_index,
            "promotion": promotion,
            "temperature_c": np.round(store_temperature[store_of], 1),
            "rain_mm": np.round(store_rain[store_of], 1),
            # The trailing mean as the sales system reports it: the row's typical demand, measured with some noise.
            "units_28d_avg": np.round(shop.base_units * rng.lognormal(0.0, 0.08, n), 2),
        }
    )


def _with_dirt(rng: np.random.Generator, frame: pl.DataFrame) -> pl.DataFrame:
    n = frame.height
    hit = {kind: pl.Series(rng.random(n) < rate) for kind, rate in DIRTY_RATES.items()}
    return frame.with_columns(
        pl.when(hit["store_item_blank"]).then(pl.lit("")).otherwise(pl.col(ENTITY_COLUMN)).alias(ENTITY_COLUMN),
        pl.when(hit["temperature_missing"]).then(None).otherwise(pl.col("temperature_c")).alias("temperature_c"),
        pl.when(hit["price_index_missing"]).then(None).otherwise(pl.col("price_index")).alias("price_index"),
        pl.when(hit["units_28d_avg_missing"]).then(None).otherwise(pl.col("units_28d_avg")).alias("units_28d_avg"),
    )


def generate_sales_day(plan: SalesDayPlan, *, seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(raw rows with dirt, labels) of one day; the labels are observed the next day."""
    shop = assortment(plan.rows, seed=seed)
    rng = np.random.default_rng([seed, plan.date.toordinal()])
    clean = _clean_day(rng, plan, shop)
    mean = np.exp(sales_log_mean(clean, shop.base_units))
    shape = sales_dispersion(clean)
    units = rng.poisson(mean * rng.gamma(shape, 1.0 / shape))
    raw = _with_dirt(rng, clean)
    labels = pl.DataFrame(
        {
            ENTITY_COLUMN: raw[ENTITY_COLUMN],
            OUTCOME_COLUMN: units.astype(np.int64),
            "observed_date": [plan.date + dt.timedelta(days=1)] * plan.rows,
        }
    ).filter(pl.col(ENTITY_COLUMN) != "")
    return raw, labels


def write_sales_partitions(
    raw_root: Path, labels_root: Path, dates: list[dt.date], *, rows_per_day: int, seed: int, shift_days: int
) -> list[Path]:
    """Write `raw_root/date=D/part-0.parquet` and `labels_root/date=D/labels.parquet` for every date,
    the last `shift_days` of them shifted; returns the raw folders."""
    written = []
    for i, date in enumerate(dates):
        plan = SalesDayPlan(date=date, rows=rows_per_day, shifted=i >= len(dates) - shift_days)
        raw, labels = generate_sales_day(plan, seed=seed)
        raw_dir = raw_root / f"date={date.isoformat()}"
        labels_dir = labels_root / f"date={date.isoformat()}"
        raw_dir.mkdir(parents=True, exist_ok=True)
        labels_dir.mkdir(parents=True, exist_ok=True)
        raw.write_parquet(raw_dir / "part-0.parquet")
        labels.write_parquet(labels_dir / "labels.parquet")
        written.append(raw_dir)
    return written
