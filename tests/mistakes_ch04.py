"""The catalogue of plausible wrong answers to chapter 4's implement exercise (4.3, SwiGLU).

Not collected by pytest (the name does not start with test_): tests/test_exercises_ch04.py
shows each one rejected by check_swiglu_ffn with its own message.

- `swiglu_*` are `forward(self, x)` methods of a module with w_gate, w_up and w_down.
- `ffn_*` are their library-shaped counterparts, where helpers.FeedForward (Linear, GELU,
  Linear, Dropout in self.net) has one: planted as `helpers.core.layers:FeedForward.forward` by
  tests/plant_mistake.py. The gate-specific mistakes have no library counterpart: the library's
  feed-forward network has no gate.
"""

import torch
import torch.nn.functional as F


def swiglu_correct(self, x):
    return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


def swiglu_silu_on_up(self, x):  # gate and value swapped
    return self.w_down(self.w_gate(x) * F.silu(self.w_up(x)))


def swiglu_sigmoid(self, x):  # SiLU(z) = z * sigmoid(z), not sigmoid(z)
    return self.w_down(torch.sigmoid(self.w_gate(x)) * self.w_up(x))


def swiglu_gelu(self, x):
    return self.w_down(F.gelu(self.w_gate(x)) * self.w_up(x))


def swiglu_relu(self, x):
    return self.w_down(F.relu(self.w_gate(x)) * self.w_up(x))


def swiglu_no_activation(self, x):
    return self.w_down(self.w_gate(x) * self.w_up(x))


def swiglu_no_gate(self, x):  # w_up never used
    return self.w_down(F.silu(self.w_gate(x)))


def swiglu_silu_of_product(self, x):
    return self.w_down(F.silu(self.w_gate(x) * self.w_up(x)))


def swiglu_sum_not_product(self, x):
    return self.w_down(F.silu(self.w_gate(x)) + self.w_up(x))


def swiglu_no_w_down(self, x):
    return F.silu(self.w_gate(x)) * self.w_up(x)


# --- library-shaped counterparts: helpers.FeedForward.forward ---


def _ffn(self, x, act):
    first, _, second, drop = self.net
    return drop(second(act(first(x))))


def ffn_sigmoid(self, x):
    return _ffn(self, x, torch.sigmoid)


def ffn_relu(self, x):
    return _ffn(self, x, F.relu)


def ffn_silu(self, x):  # the activation of the other variant
    return _ffn(self, x, F.silu)


def ffn_no_activation(self, x):
    return _ffn(self, x, lambda h: h)


def ffn_no_w2(self, x):
    first, act, _, drop = self.net
    return drop(act(first(x)))
