"""core.members.one_of is np.isin, mask for mask, on the columns the model asks about;
unique_sorted is np.unique of a column already in order."""

from __future__ import annotations

import numpy as np
import pytest

from vramscope.viewer.model.core.members import MAX_CODES, one_of, unique_sorted
from vramscope.viewer.model.core.snapshot import Action


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64, bool])
@pytest.mark.parametrize(
    "codes",
    [(), (0,), (3, 4, 5, 6), (-1, 2), (300, 1), (1, 1, 2), tuple(range(-3, MAX_CODES + 3))],
)
def test_the_same_mask_as_isin(dtype, codes):
    rng = np.random.default_rng(7)
    column = rng.integers(-4, 10, 5000).astype(dtype)
    assert np.array_equal(one_of(column, codes), np.isin(column, list(codes)))


def test_enum_codes_and_shapes():
    action = np.array([[0, 3, 7], [2, 8, -1]], np.int8)
    got = one_of(action, (Action.ALLOC, Action.OOM))
    assert got.shape == action.shape
    assert np.array_equal(got, np.isin(action, [int(Action.ALLOC), int(Action.OOM)]))
    assert one_of(np.zeros(0, np.int8), (1, 2)).shape == (0,)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint64, np.float64])
@pytest.mark.parametrize("n", [0, 1, 2, 3, 50, 5000])
def test_unique_sorted_is_np_unique_of_a_sorted_column(dtype, n):
    rng = np.random.default_rng(n)
    column = np.sort(rng.integers(0, max(n // 3, 1) + 1, n).astype(dtype))
    got, want = unique_sorted(column), np.unique(column)
    assert got.dtype == want.dtype and np.array_equal(got, want)
    assert got is not column  # a column of its own, as np.unique gives
