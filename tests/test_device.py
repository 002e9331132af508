"""helpers.device(): the CPU unless asked; a clear error for a device that is not there."""

import pytest
import torch

from helpers import BOOK_RECIPE, device
from helpers.training.checkpoints import checkpoint_path


def test_cpu_by_default(monkeypatch):
    monkeypatch.delenv("TRANSFORMER_BOOK_DEVICE", raising=False)
    assert device() == torch.device("cpu")


def test_the_environment_variable_is_honoured(monkeypatch):
    monkeypatch.setenv("TRANSFORMER_BOOK_DEVICE", " CPU ")
    assert device() == torch.device("cpu")


def test_an_unknown_name_is_a_value_error(monkeypatch):
    monkeypatch.setenv("TRANSFORMER_BOOK_DEVICE", "gpu")
    with pytest.raises(ValueError, match="TRANSFORMER_BOOK_DEVICE='gpu' is not a device name"):
        device()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_missing_cuda_is_named(monkeypatch):
    monkeypatch.setenv("TRANSFORMER_BOOK_DEVICE", "cuda")
    with pytest.raises(RuntimeError, match="sees no CUDA GPU"):
        device()


def test_a_model_trained_elsewhere_gets_its_own_checkpoint_file(tmp_path, monkeypatch):
    from helpers.training import checkpoints

    monkeypatch.setattr(checkpoints, "pin_problems", lambda: [])  # as in the book's kernel
    cpu = checkpoint_path(BOOK_RECIPE, tmp_path)
    cuda = checkpoint_path(BOOK_RECIPE, tmp_path, "cuda:0")
    assert cpu.name == f"reversal-{BOOK_RECIPE.key()}.pt"
    assert cuda.name == f"reversal-{BOOK_RECIPE.key()}-cuda.pt"
    assert checkpoint_path(BOOK_RECIPE, tmp_path, "cpu") == cpu
