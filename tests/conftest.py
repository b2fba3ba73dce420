import pytest
import torch


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "cuda: needs a CUDA device, skipped without one (`python -m harness gpu-check` runs them)"
    )


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    # Results are compared bit for bit; one thread keeps CPU reductions in a fixed order.
    torch.set_num_threads(1)
