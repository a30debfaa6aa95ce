"""The mark of the tests that need a CUDA GPU (``pytest -m gpu`` on the GPU machine).

They skip where torch has no CUDA device: the CUDA boundary is the one place a test may
not run here, and these tests are the ones that then run it for real there.
"""

from __future__ import annotations

import pytest


def cuda_available() -> bool:
    """torch is installed and sees a CUDA device."""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


ON_GPU = [
    pytest.mark.gpu,
    pytest.mark.skipif(not cuda_available(), reason="needs torch with CUDA and a GPU"),
]
