import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    # Results are compared bit for bit; one thread keeps CPU reductions in a fixed order.
    torch.set_num_threads(1)
