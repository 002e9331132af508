"""check_model's overfit stage: the book's training step passes; a broken optimiser step, a frozen
schedule and misaligned labels each fail with their own message; nothing else changes."""

import dataclasses
import math
import re

import pytest
import torch
import torch.nn.functional as F

from helpers import PAD_ID, VOCAB_SIZE, make_reversal_dataset
from helpers.debugging import check_model
from helpers.training.recipes import BOOK_RECIPE
from helpers.training.train import build_model, lr_factor


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def make_step_factory(broken=None):
    """The book's step (Adam, lr_factor(BOOK_RECIPE), shift by one), or one of three breaks."""

    def make_train_step(model):
        opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(BOOK_RECIPE))

        def step(src, tgt):
            tgt_in = tgt[:, :-1]
            tgt_out = tgt_in if broken == "labels" else tgt[:, 1:]
            logits = model(src, tgt_in)
            loss = F.cross_entropy(
                logits.reshape(-1, VOCAB_SIZE), tgt_out.reshape(-1), ignore_index=PAD_ID
            )
            if broken == "zero_grad_late":
                loss.backward()
                opt.zero_grad()
                opt.step()
            else:
                opt.zero_grad()
                loss.backward()
                opt.step()
            if broken != "frozen":
                sched.step()
            return loss.item()

        return step

    return make_train_step


@pytest.fixture(scope="module")
def batch():
    return make_reversal_dataset(8, seed=7)


def small(seed=0):
    return build_model(dataclasses.replace(BOOK_RECIPE, seed=seed)).train()


def overfit(model, batch, broken=None):
    return check_model(model, batch, make_train_step=make_step_factory(broken), verbose=False)


def test_the_books_step_overfits_one_batch(batch):
    model = small()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    report = overfit(model, batch)
    assert report.ok, str(report)
    assert report["overfit one batch"].status == "ok"
    # the model passed in is untouched, in its mode, and the global random state is restored
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert model.training and all(p.grad is None for p in model.parameters())
    assert torch.equal(rng, torch.get_rng_state())


@pytest.mark.parametrize(
    "broken, fragment",
    [
        ("zero_grad_late", "the optimiser never stepped"),
        ("frozen", "is scheduler.step\\(\\) called"),
        ("labels", "the labels are misaligned"),
    ],
)
def test_each_broken_step_fails_with_its_own_message(batch, broken, fragment):
    report = overfit(small(), batch, broken)
    assert report.failed_checks == ["overfit one batch"], str(report)
    assert pytest.approx(0.2 * torch.log(torch.tensor(VOCAB_SIZE)).item(), abs=0.01) == float(
        report["overfit one batch"].message.split("(limit ")[1].split(")")[0]
    )
    assert re.search(fragment, report["overfit one batch"].message), str(report)


def overfit_end(report):
    return float(report["overfit one batch"].message.split("-> ")[1].split(" ")[0])


@pytest.mark.slow
def test_the_limit_lies_between_the_correct_and_the_frozen_runs(batch):
    # check_model's docstring: over the model seeds 0-9, the book's step ends 50 steps far
    # below the limit, and a schedule that never advances ends above it
    correct = [overfit_end(overfit(small(s), batch)) for s in range(10)]
    frozen = [overfit_end(overfit(small(s), batch, "frozen")) for s in range(10)]
    limit = 0.2 * math.log(VOCAB_SIZE)
    assert max(correct) < limit < min(frozen), (correct, frozen)


def test_a_step_that_never_calls_step_is_caught(batch):
    def make_train_step(model):
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)

        def step(src, tgt):
            opt.zero_grad()
            logits = model(src, tgt[:, :-1])
            F.cross_entropy(logits.reshape(-1, VOCAB_SIZE), tgt[:, 1:].reshape(-1)).backward()

        return step

    report = check_model(small(), batch, make_train_step=make_train_step, overfit_steps=3,
                         verbose=False)  # fmt: skip
    assert "the optimiser never stepped" in report["overfit one batch"].message


def test_without_a_train_step_there_is_no_overfit_stage(batch):
    report = check_model(small(), batch, verbose=False)
    assert all(f.stage != "overfit" for f in report.findings)
    assert "overfit" not in str(report)


def test_a_model_that_does_not_run_skips_the_overfit_stage(batch):
    class Broken(torch.nn.Module):
        def forward(self, src, tgt_in):
            raise RuntimeError("shapes do not fit")

    report = check_model(Broken(), batch, make_train_step=make_step_factory(), verbose=False)
    assert report["overfit one batch"].status == "skip"


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda s, t: (s, t[:, :1]), r"tgt_in = tgt\[:, :-1\] has shape \[8, 0\]"),
        (lambda s, t: (s, t[:, :0], t[:, :0]), r"tgt_in has shape \[8, 0\]"),
        (lambda s, t: (s[:, :0], t), r"src has shape \[8, 0\]"),
        (lambda s, t: (s[:0], t[:0]), r"src has shape \[0, 14\]"),
    ],
)
def test_an_empty_batch_or_sequence_is_a_clear_error(batch, make, fragment):
    with pytest.raises(ValueError, match=fragment):
        check_model(small(), make(*batch), verbose=False)
