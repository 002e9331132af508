"""check_model: a Transformer checked in the order one debugs it (chapter 17).

    shapes -> masks -> data -> loss at init -> gradients, and NaN/inf anywhere.

Every check looks at what the model *does* on one batch, never at its source code:
- the output shape of a forward pass;
- the masks the attention modules actually receive (caught with forward pre-hooks), and
  two behavioural probes: changing future target tokens must not change earlier logits
  (causality); removing the source's padding columns must not change any logit
  (padding invariance); two forward passes in eval mode must agree (nothing stuck in
  training mode);
- the batch itself: the decoder input starts with BOS, BOS is not PAD, ids are inside the
  vocabulary, the target is the decoder input shifted by one;
- the loss at initialisation against ln(V), and the scale of the embeddings entering the
  first LayerNorm of each stack;
- gradient norms per block, parameters that get no gradient, and tensors that take part
  in the forward pass with requires_grad=True but are not registered parameters (a layer
  kept in a plain Python list);
- NaN/inf in parameters, activations (naming the first module that produced one), the loss
  and the gradients.
- with make_train_step (the reader's own optimiser, schedule and shift): overfit one batch, a
  copy of the model trained a few dozen steps on the batch must drive its loss near zero.

The model is any nn.Module with forward(src, tgt_in) -> logits [B, Lt, V]; helpers.Transformer
is the reference. check_model leaves the model as it found it: same train/eval mode, no
.grad written (gradients come from torch.autograd.grad), and its probes draw their random tokens
from a private generator (a healthy model in eval mode consumes no global random state).

One module per stage (shapes, masks, data, loss_at_init, gradients, nan_inf), plus the
report they fill (report), the forward hooks they read (recorder), and check_model, which
runs them in order (check); overfit one batch (overfit), run when asked; and the band of the
book's training curve that compare_with_band holds a reader's run against (band).
"""

from .band import BandReport, TrainingBand, compare_with_band, training_band
from .check import check_model
from .gradients import block_of
from .report import STAGES, Finding, ModelReport

__all__ = [
    "STAGES",
    "BandReport",
    "Finding",
    "ModelReport",
    "TrainingBand",
    "block_of",
    "check_model",
    "compare_with_band",
    "training_band",
]
