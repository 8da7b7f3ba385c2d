import os

import pytest
import torch
from hypothesis import settings

# CI profile: reproducible examples, no per-example deadline (2-core machines are noisy).
settings.register_profile("ci", derandomize=True, deadline=None, max_examples=60, print_blob=True)
settings.register_profile("dev", deadline=None, max_examples=30)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

torch.set_num_threads(max(1, min(2, torch.get_num_threads())))


@pytest.fixture
def one_thread():
    """Run a test with one torch thread (bit-for-bit reproducible training numbers), then restore."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
