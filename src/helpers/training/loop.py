"""What the two training loops share: chapter 10's single process (helpers.training.train) and
chapter 23's data-parallel ranks (helpers.training.distributed) compute the same loss, decide
when to evaluate by the same gate, confirm a score that reaches the target the same way, and
keep their histories the same way, and take the same update step (under DDP, its backward is
where the gradients are all-reduced).

token_loss(logits, tgt_out)                  the teacher-forced cross-entropy of the real tokens;
update(loss, opt, sched)                     one optimizer and schedule step on the loss;
evaluation_due(cfg, step, batch_exact, last) the evaluation gate;
evaluate_and_confirm(cfg, score, confirm)    the score, confirmed by greedy decoding when it
                                             reaches the target, and whether to stop;
record(history, **values)                    one value appended to each named list.
"""

import torch
import torch.nn.functional as F

from helpers.core.vocab import PAD_ID


def token_loss(
    logits: torch.Tensor,
    tgt_out: torch.Tensor,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """Cross-entropy of logits [B, L, V] against the labels tgt_out [B, L], <pad> left out;
    the mean over the real tokens, or their sum (reduction="sum": a rank of chapter 23 divides
    it by the global token count). In float32 whatever the logits' dtype (autocast)."""
    return F.cross_entropy(
        logits.float().reshape(-1, logits.size(-1)),
        tgt_out.reshape(-1),
        ignore_index=PAD_ID,
        label_smoothing=label_smoothing,
        reduction=reduction,
    )


def update(loss: torch.Tensor, opt, sched) -> None:
    """One update: clear the last step's gradients, backpropagate loss (under
    DistributedDataParallel, backward also all-reduces the gradients, bucket by bucket), take the
    optimizer's step, then advance the learning-rate schedule."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()


def evaluation_due(cfg, step: int, batch_exact: float, last: int) -> bool:
    """The gate: every cfg.eval_every-th step whose training batch (scored before its update) is
    at least cfg.eval_gate exactly right, and the last step whatever its batch."""
    gated = step % cfg.eval_every == 0 and batch_exact >= cfg.eval_gate
    return gated or step == last


def evaluate_and_confirm(cfg, score, confirm: bool) -> tuple[float, bool]:
    """(exact match, stop): score(greedy=False) is the cheap teacher-forced score; when it
    reaches cfg.target_exact_match and confirm is set, score(greedy=True), greedy decoding,
    replaces it and must reach the target too. Without a target training never stops here."""
    em = score(greedy=False)
    done = cfg.target_exact_match is not None and em >= cfg.target_exact_match
    if done and confirm:
        em = score(greedy=True)
        done = em >= cfg.target_exact_match
    return em, done


def record(history: dict, **values) -> None:
    """Append each value to the list of its name in history (a plain dict of lists, so that a
    checkpoint loads it with weights_only=True)."""
    for key, value in values.items():
        history[key].append(value)
