"""Features of the gearbox fault-warning job, shared by the demo models' training and by scoring.

A row is one vibration window of `WINDOW_SAMPLES` samples at `SAMPLE_RATE_HZ` (about 0.2 s of
accelerometer signal). Gear damage shows as energy at the gear-mesh harmonics, sidebands at the
shaft frequency around them and impacts that ring the housing, so a window is summarised by its
log energy in fixed frequency bands (Welch's averaged periodogram), its RMS and its kurtosis.
Every statistic is computed per row over the whole chunk at once: no row can influence another,
so a chunk and its halves give identical features.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from scipy.signal import welch

FEATURE_VERSION = "1.0.0"

SAMPLE_RATE_HZ = 10_000
WINDOW_SAMPLES = 2048
WINDOW_COLUMN = "window"
SEGMENT_SAMPLES = 256
"""Welch segment: 39 Hz bins, 15 half-overlapping Hann segments averaged per window."""

BAND_EDGES_HZ: tuple[int, ...] = (*range(0, 4800, 300), SAMPLE_RATE_HZ // 2)
"""300 Hz bands up to 4.5 kHz, then 4.5 kHz to Nyquist; each band includes its lower edge."""

BANDS: tuple[str, ...] = tuple(
    f"band_{lo}_{hi}hz" for lo, hi in zip(BAND_EDGES_HZ[:-1], BAND_EDGES_HZ[1:], strict=True)
)

FEATURES: tuple[str, ...] = (*BANDS, "rms", "kurtosis")

_POWER_FLOOR = 1e-12
"""Added before the logarithm, so that a silent band is a very low energy (-120 dB), not -inf."""


def window_matrix(frame: pl.DataFrame) -> np.ndarray:
    """The `window` column as a (rows, WINDOW_SAMPLES) float32 array, without a Python loop per row.

    Windows of another length or missing windows are an error naming the column: the guards
    quarantine them before features are computed, so reaching here with one is a broken contract.
    """
    if WINDOW_COLUMN not in frame.columns:
        raise ValueError(f"column {WINDOW_COLUMN!r} is missing; columns: {frame.columns}")
    column = frame.get_column(WINDOW_COLUMN)
    dtype = column.dtype
    if isinstance(dtype, pl.Array):
        column = column.cast(pl.List(dtype.inner))
    elif not isinstance(dtype, pl.List):
        raise ValueError(f"column {WINDOW_COLUMN!r} must hold lists of samples, got dtype {dtype}")
    if not column.dtype.inner.is_numeric():
        raise ValueError(f"column {WINDOW_COLUMN!r} must hold numeric samples, got dtype {column.dtype}")
    if column.null_count():
        raise ValueError(
            f"column {WINDOW_COLUMN!r} has {column.null_count()} missing window(s); every row needs a window"
        )
    lengths = column.list.len()
    wrong = lengths != WINDOW_SAMPLES
    if wrong.any():
        examples = lengths.filter(wrong).unique().sort().head(5).to_list()
        raise ValueError(
            f"column {WINDOW_COLUMN!r} must hold {WINDOW_SAMPLES} samples per window ({SAMPLE_RATE_HZ} Hz); "
            f"{int(wrong.sum())} of {len(column)} row(s) do not, e.g. lengths {examples}"
        )
    values = column.explode().to_numpy()
    return np.ascontiguousarray(values, dtype=np.float32).reshape(len(column), WINDOW_SAMPLES)


def band_energies_db(windows: np.ndarray) -> np.ndarray:
    """Energy of each row of `windows` in each band of BAND_EDGES_HZ, in dB re one squared unit.

    Rows must already have their mean removed: Welch's per-segment detrending is left off because
    it costs a third of the time and only moves energy within the lowest band.
    """
    freqs, psd = welch(windows, fs=SAMPLE_RATE_HZ, nperseg=SEGMENT_SAMPLES, detrend=False, axis=-1)
    starts = np.searchsorted(freqs, BAND_EDGES_HZ[:-1], side="left")
    power = np.add.reduceat(psd.astype(np.float64) * (freqs[1] - freqs[0]), starts, axis=-1)
    return 10.0 * np.log10(power + _POWER_FLOOR)


def feature_matrix(frame: pl.DataFrame) -> np.ndarray:
    """The model input: rows × FEATURES as a C-contiguous float32 array.

    RMS and excess kurtosis are taken about the window's mean (a sensor offset is not vibration);
    a flat window has no kurtosis and gets NaN, which the tree model treats as missing.
    """
    windows = window_matrix(frame)
    if windows.shape[0] == 0:
        return np.empty((0, len(FEATURES)), dtype=np.float32)
    centred = windows.astype(np.float64)
    centred -= centred.mean(axis=-1, keepdims=True)
    squared = centred * centred
    m2 = squared.mean(axis=-1)
    m4 = (squared * squared).mean(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        kurtosis = np.where(m2 > 0, m4 / (m2 * m2) - 3.0, np.nan)
    matrix = np.column_stack([band_energies_db(centred), np.sqrt(m2), kurtosis])
    return np.ascontiguousarray(matrix, dtype=np.float32)
