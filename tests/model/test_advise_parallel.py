"""advise's simulations of edited streams (free what is kept, no_grad, the optimizer
pair, checkpointing, autocast) run on the pool beside the allocator settings, each built
where it runs: the same advice as one after the other, to the byte, curves included."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import DATA
from vramscope.viewer.model import load_snapshot
from vramscope.viewer.model.core import parallel
from vramscope.viewer.model.remedies.advise import advise, format_text
from vramscope.viewer.model.whatif import prepare

pytestmark = pytest.mark.skipif(not parallel.can_fork(), reason="the pool forks (Linux only)")

# Each recording with the remedies (their specs' ids) whose runs it makes on the pool.
RECORDINGS = {
    "gpt2_leak": {"free_kept", "8bit_optimizer", "gradient_checkpointing", "bf16_autocast"},
    "vit_val_grad": {"no_grad_forward", "8bit_optimizer"},
    "gpt2_adamw_fp32": {"8bit_optimizer", "gradient_checkpointing", "bf16_autocast"},
}


@pytest.fixture
def pooled_items(monkeypatch):
    """The items of every pooled pmap, so a test knows which runs went through the pool."""
    seen: list[list] = []
    real = parallel._pooled

    def spy(*args, **kwargs):
        seen.append(list(args[1]))
        return real(*args, **kwargs)

    monkeypatch.setattr(parallel, "_pooled", spy)
    return seen


@pytest.mark.parametrize("name", sorted(RECORDINGS))
def test_advise_is_the_same_serial_and_on_the_pool(name, pooled_items, monkeypatch):
    case = prepare(load_snapshot(DATA / "truth" / f"{name}.pickle.xz"))
    # These recordings are small: the size rule would run them serially.
    monkeypatch.setenv(parallel.JOBS_ENV, "1")
    serial = advise(case)
    assert pooled_items == []
    monkeypatch.setenv(parallel.JOBS_ENV, "2")
    pooled = advise(case)
    # A pool task is named SPEC/RUN.
    specs = {k.split("/")[0] for items in pooled_items for k in items if isinstance(k, str)}
    assert RECORDINGS[name] <= specs, specs
    assert "allocator" in specs

    assert pooled.to_dict() == serial.to_dict()
    assert format_text(pooled) == format_text(serial)
    ids = [r.remedy for r in serial.remedies]
    assert len(ids) >= 3
    for a, b in zip(pooled.remedies, serial.remedies):
        for f in ("curve", "curve_x", "acts_on"):
            x, y = getattr(a, f), getattr(b, f)
            assert (x is None) == (y is None), (a.remedy, f)
            if x is not None:
                assert x.dtype == y.dtype and np.array_equal(x, y), (a.remedy, f)
