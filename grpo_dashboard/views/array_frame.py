"""A table of equal-length numpy columns with the small part of pandas.DataFrame's interface the chart code uses."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd


class ArrayFrame:
    """Equal-length numpy columns behind the part of pandas.DataFrame's interface the chart code uses (`len`,
    `empty`, `columns`, `frame[name].to_numpy(dtype)`, `frame[name].min()`): a live page builds ~30 of these per
    redraw, and a DataFrame costs ~0.5 ms each to make."""

    __slots__ = ("_columns",)

    def __init__(self, columns: dict[str, np.ndarray]) -> None:
        self._columns = columns

    @property
    def columns(self) -> list[str]:
        """The column names."""
        return list(self._columns)

    @property
    def empty(self) -> bool:
        """True without rows."""
        return len(self) == 0

    def __len__(self) -> int:
        return len(self._columns["step"])

    def __getitem__(self, name: str) -> pd.Series:
        return _ArrayColumn(self._columns[name])  # type: ignore[return-value]

    def to_pandas(self) -> pd.DataFrame:
        """The same columns as a DataFrame."""
        return pd.DataFrame(self._columns)


class _ArrayColumn:
    __slots__ = ("values",)

    def __init__(self, values: np.ndarray) -> None:
        self.values = values

    def to_numpy(self, dtype: Any = None) -> np.ndarray:
        return self.values if dtype is None else self.values.astype(dtype, copy=False)

    def min(self) -> float:
        return float(np.nanmin(self.values)) if self.values.size and not np.isnan(self.values).all() else math.nan

    def notna(self) -> Any:
        return pd.Series(~np.isnan(self.values.astype("float64", copy=False)))
