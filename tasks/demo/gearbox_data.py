"""Seeded generator of gearbox vibration windows in daily partitions, with labels that arrive later.

Each turbine records `windows_per_turbine` accelerometer windows a day at 10 kHz. A healthy
gearbox shows shaft harmonics and the gear-mesh frequency (shaft frequency × pinion teeth) with
its harmonics over broadband noise; load, sensor gain and noise vary per window and per turbine,
and now and then an electrical spike hits a healthy window. A damaged tooth raises the mesh
harmonics selectively, modulates them with the shaft (sidebands at ± the shaft frequency) and
rings the housing resonance once per revolution. Most damage is mild, so faults are learnable
but not trivially separable.

Each day is drawn from its own seed (`seed`, date) and the fleet's traits from `seed` alone, so a
date's rows do not depend on which other dates are generated.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from tasks.features.gearbox import SAMPLE_RATE_HZ, WINDOW_COLUMN, WINDOW_SAMPLES

TURBINES: tuple[str, ...] = tuple(f"T{i:02d}" for i in range(1, 7))
PINION_TEETH = 37
RATED_RPM = 1560.0
"""High-speed shaft at 26 Hz: gear mesh at 962 Hz, its harmonics inside the 300 Hz feature bands."""

MESH_HARMONICS = np.array([1.0, 0.35, 0.18, 0.08, 0.05], dtype=np.float32)
"""Healthy amplitude of the 1st..5th gear-mesh harmonic, relative to the turbine's gain."""
FAULT_MESH_GAIN = np.array([0.3, 1.2, 1.6, 1.2, 0.8], dtype=np.float32)
"""How much each mesh harmonic grows per unit of fault severity."""

BASE_FAULT_RATE = 0.02
DEGRADING_FAULT_RATE = 0.10
DEGRADING_TURBINES = 2
"""Turbines (drawn from the seed) whose gearboxes are degrading and fault far more often."""

LABEL_MISSED_FAULT = 0.08
LABEL_UNSEEN_FAULT = 0.01
"""Share of faulty windows not followed by a recorded fault, and of healthy ones that are."""
LABEL_DELAY_DAYS = 7

DIRTY_RATES: dict[str, float] = {
    "window_truncated": 0.003,
    "window_missing": 0.002,
    "curtailed": 0.004,
}
"""Share of windows per kind of dirt: a sensor buffer cut short (2000 samples), an upload with
no samples, and a window recorded while the turbine was curtailed far below rated speed."""
TRUNCATED_SAMPLES = 2000

ROW_GROUP_ROWS = 1024
"""Parquet row groups stay well below a scoring chunk: a row group is read whole."""

RAW_SCHEMA = pa.schema(
    [
        ("entity_id", pa.string()),
        ("turbine_id", pa.string()),
        ("window_start", pa.timestamp("us", tz="UTC")),
        ("shaft_rpm", pa.float64()),
        (WINDOW_COLUMN, pa.list_(pa.float32())),
    ]
)


@dataclass(frozen=True)
class GearboxDayPlan:
    date: dt.date
    windows_per_turbine: int


@dataclass(frozen=True)
class Fleet:
    """Per-turbine traits, one entry per turbine of TURBINES."""

    rated_rpm: np.ndarray
    gain: np.ndarray
    noise_rms: np.ndarray
    resonance_hz: np.ndarray
    fault_rate: np.ndarray


def fleet(seed: int) -> Fleet:
    """The turbines' traits, drawn from `seed` alone: every day of a demo sees the same fleet."""
    rng = np.random.default_rng([seed, 0x6EA2])
    n = len(TURBINES)
    degrading = np.zeros(n, dtype=bool)
    degrading[rng.choice(n, DEGRADING_TURBINES, replace=False)] = True
    return Fleet(
        rated_rpm=RATED_RPM * rng.uniform(0.985, 1.015, n),
        gain=rng.lognormal(0.0, 0.15, n),
        noise_rms=rng.uniform(0.25, 0.40, n),
        resonance_hz=rng.uniform(3300.0, 3500.0, n),
        fault_rate=np.where(degrading, DEGRADING_FAULT_RATE, BASE_FAULT_RATE),
    )


def synthetic_windows(
    rng: np.random.Generator,
    *,
    shaft_rpm: np.ndarray,
    severity: np.ndarray,
    gain: np.ndarray,
    noise_rms: np.ndarray,
    resonance_hz: np.ndarray,
    spike_rate: float = 0.015,
) -> np.ndarray:
    """(rows, WINDOW_SAMPLES) float32 vibration windows; `severity` 0 is healthy, up to 1 badly damaged.

    All arguments are per-row arrays; the signal is built for all rows at once, tone by tone.
    """
    n = shaft_rpm.shape[0]
    t = (np.arange(WINDOW_SAMPLES, dtype=np.float32) / SAMPLE_RATE_HZ)[None, :]
    shaft_hz = (shaft_rpm / 60.0).astype(np.float32)
    mesh_hz = shaft_hz * PINION_TEETH
    load = rng.uniform(0.7, 1.3, n).astype(np.float32)
    level = (gain * load).astype(np.float32)
    severity = severity.astype(np.float32)
    noise = (noise_rms * rng.uniform(0.8, 1.25, n)).astype(np.float32)
    signal = rng.standard_normal((n, WINDOW_SAMPLES), dtype=np.float32) * noise[:, None]

    def add_tones(rows: slice | np.ndarray, freq: np.ndarray, amplitude: np.ndarray) -> None:
        tone = freq.astype(np.float32)[:, None] * t
        tone *= np.float32(2.0 * np.pi)
        tone += rng.uniform(0.0, 2.0 * np.pi, freq.size).astype(np.float32)[:, None]
        np.sin(tone, out=tone)
        tone *= amplitude.astype(np.float32)[:, None]
        signal[rows] += tone

    every = slice(None)
    for k, amplitude in enumerate((0.30, 0.12, 0.06), start=1):
        add_tones(every, shaft_hz * k, level * np.float32(amplitude) * rng.uniform(0.6, 1.4, n).astype(np.float32))
    for h in range(MESH_HARMONICS.size):
        add_tones(every, mesh_hz * (h + 1), level * MESH_HARMONICS[h] * (1 + FAULT_MESH_GAIN[h] * severity))

    faulty = np.flatnonzero(severity > 0)
    if faulty.size:
        s, f_shaft, f_mesh, lvl = severity[faulty], shaft_hz[faulty], mesh_hz[faulty], level[faulty]
        for h in range(3):
            for offset, share in ((1, 0.35), (2, 0.15)):
                for sign in (-1, 1):
                    sideband = f_mesh * (h + 1) + sign * offset * f_shaft
                    add_tones(faulty, sideband, lvl * MESH_HARMONICS[h] * np.float32(share) * s)
        # One impact per revolution rings the housing resonance, decaying within about a millisecond.
        revolution = 1.0 / f_shaft[:, None]
        first_impact = rng.uniform(0, 1, faulty.size).astype(np.float32)[:, None] * revolution
        since_impact = np.mod(t - first_impact, revolution)
        resonance = resonance_hz[faulty].astype(np.float32)[:, None]
        ring = np.exp(-since_impact / np.float32(1e-3)) * np.sin(np.float32(2.0 * np.pi) * resonance * since_impact)
        impact = np.float32(2.0) * lvl * s * rng.uniform(0.5, 1.5, faulty.size).astype(np.float32)
        signal[faulty] += impact[:, None] * ring

    # Electrical spikes hit healthy and faulty windows alike: impulsive, but not gear damage.
    spiked = np.flatnonzero(rng.random(n) < spike_rate)
    spike = rng.uniform(3.0, 6.0, spiked.size).astype(np.float32) * rng.choice([-1, 1], spiked.size)
    signal[spiked, rng.integers(0, WINDOW_SAMPLES, spiked.size)] += spike
    return signal


def generate_day(plan: GearboxDayPlan, *, seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(raw windows with dirt, labels) of one day, rows ordered by window start."""
    rng = np.random.default_rng([seed, plan.date.toordinal()])
    traits = fleet(seed)
    per = plan.windows_per_turbine
    turbine = np.repeat(np.arange(len(TURBINES)), per)
    index = np.tile(np.arange(per), len(TURBINES))
    n = turbine.size

    interval_us = 86_400_000_000 // per
    midnight_us = (plan.date - dt.date(1970, 1, 1)).days * 86_400_000_000
    start_us = midnight_us + index * interval_us + rng.integers(0, interval_us // 2, n)

    day_factor = rng.lognormal(0.0, 0.4)
    faulty = rng.random(n) < np.minimum(traits.fault_rate[turbine] * day_factor, 0.5)
    severity = np.where(faulty, rng.beta(2.0, 4.0, n) + 0.05, 0.0)
    curtailed = rng.random(n) < DIRTY_RATES["curtailed"]
    rpm = traits.rated_rpm[turbine] * (1.0 + 0.01 * rng.standard_normal(n))
    rpm = np.where(curtailed, rng.uniform(450.0, 900.0, n), rpm)
    windows = synthetic_windows(
        rng,
        shaft_rpm=rpm,
        severity=severity,
        gain=traits.gain[turbine],
        noise_rms=traits.noise_rms[turbine],
        resonance_hz=traits.resonance_hz[turbine],
    )

    missing = rng.random(n) < DIRTY_RATES["window_missing"]
    truncated = ~missing & (rng.random(n) < DIRTY_RATES["window_truncated"])
    keep = np.ones(windows.shape, dtype=bool)
    keep[truncated, TRUNCATED_SAMPLES:] = False
    keep[missing] = False
    offsets = np.concatenate([[0], np.cumsum(keep.sum(axis=1))]).astype(np.int32)
    window_column = pa.ListArray.from_arrays(pa.array(offsets), pa.array(windows[keep]), mask=pa.array(missing))

    names = np.array(TURBINES)[turbine]
    entity = [f"{t}-{plan.date:%Y%m%d}-{i:05d}" for t, i in zip(names, index, strict=True)]
    table = pa.table(
        [
            pa.array(entity, pa.string()),
            pa.array(names, pa.string()),
            pa.array(start_us, pa.timestamp("us", tz="UTC")),
            pa.array(np.round(rpm, 1)),
            window_column,
        ],
        schema=RAW_SCHEMA,
    )
    order = np.argsort(start_us, kind="stable")
    raw = pl.from_arrow(table.take(pa.array(order)))

    flip = rng.random(n)
    outcome = np.where(faulty, flip >= LABEL_MISSED_FAULT, flip < LABEL_UNSEEN_FAULT).astype(np.int8)
    labels = pl.DataFrame(
        {
            "entity_id": entity,
            "outcome": outcome,
            "observed_date": [plan.date + dt.timedelta(days=LABEL_DELAY_DAYS)] * n,
        }
    )[order]
    return raw, labels


def write_gearbox_partitions(
    raw_root: Path, labels_root: Path, dates: list[dt.date], *, windows_per_turbine: int, seed: int
) -> list[Path]:
    """Write `raw_root/date=D/part-<turbine>.parquet` (one file per turbine, as each uploads its own)
    and `labels_root/date=D/labels.parquet` for every date; returns the raw folders."""
    written = []
    for date in dates:
        raw, labels = generate_day(GearboxDayPlan(date=date, windows_per_turbine=windows_per_turbine), seed=seed)
        raw_dir = raw_root / f"date={date.isoformat()}"
        labels_dir = labels_root / f"date={date.isoformat()}"
        raw_dir.mkdir(parents=True, exist_ok=True)
        labels_dir.mkdir(parents=True, exist_ok=True)
        for turbine, part in raw.partition_by("turbine_id", as_dict=True, maintain_order=True).items():
            table = part.to_arrow().cast(RAW_SCHEMA)
            pq.write_table(
                table,
                raw_dir / f"part-{turbine[0]}.parquet",
                row_group_size=ROW_GROUP_ROWS,
                compression="zstd",
                # Noisy samples never repeat: dictionary-encoding them only costs time. Splitting
                # the bytes of each float32 lets zstd compress exponents and signs.
                use_dictionary=["entity_id", "turbine_id"],
                use_byte_stream_split=[f"{WINDOW_COLUMN}.list.element"],
            )
        labels.write_parquet(labels_dir / "labels.parquet")
        written.append(raw_dir)
    return written
