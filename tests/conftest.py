"""Unit tests use tiny models: one thread is faster than two (no cross-thread sync) and
keeps timings sane when the machine is busy."""

import torch

torch.set_num_threads(1)
