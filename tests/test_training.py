"""The training loop, the cheap exact-match proxy, the checkpoint cache and the train/test
overlap count (tiny configs: seconds). The properties the chapters rely on are each checked
against an independent computation, so that a one-line slip fails here: padding counted in the
loss, the scheduler stepped twice, the last training row not counted."""

import dataclasses
import signal
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from helpers import (
    PAD_ID,
    VOCAB_SIZE,
    exact_match,
    make_reversal_dataset,
    train_test_overlap,
)
from helpers.training.checkpoints import (
    checkpoint_path,
    load_checkpoint,
    load_or_train,
    save_checkpoint,
)
from helpers.training.loop import evaluate_and_confirm, evaluation_due
from helpers.training.recipes import (
    BOOK_RECIPE,
    COMPARISON_STEPS,
    SEED_RECIPE,
    TrainConfig,
    default_init_recipe,
    fixed_budget_recipe,
)
from helpers.training.schedule import noam_lambda
from helpers.training.train import (
    build_model,
    epoch_batches,
    lr_factor,
    teacher_forced_exact_match,
    train_reversal,
)

TINY = TrainConfig(
    d_model=16,
    num_heads=2,
    dff=32,
    num_layers=1,
    dropout=0.0,
    train_size=256,
    val_size=64,
    batch_size=32,
    warmup=10,
    max_steps=6,
    eval_every=3,
    eval_size=64,
)


def test_train_records_history_and_respects_the_budget():
    res = train_reversal(TINY, progress=False)
    h = res.history
    assert h["step"] == list(range(1, TINY.max_steps + 1))
    assert len(h["loss"]) == len(h["token_acc"]) == len(h["lr"]) == TINY.max_steps
    assert h["eval_step"] == [3, 6] and len(h["exact_match"]) == len(h["seconds"]) == 2
    assert all(0.0 <= a <= 1.0 for a in h["token_acc"] + h["exact_match"])
    assert not res.model.training and not res.from_cache


def test_training_is_reproducible():
    a, b = train_reversal(TINY, progress=False), train_reversal(TINY, progress=False)
    assert a.history["loss"] == b.history["loss"]
    for (k, va), vb in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        torch.testing.assert_close(va, vb, rtol=0, atol=0, msg=k)


def test_early_stop_at_target():
    cfg = dataclasses.replace(TINY, max_steps=50, eval_every=2, target_exact_match=0.0)
    res = train_reversal(cfg, progress=False)
    assert res.history["step"][-1] == 2 and res.history["eval_step"] == [2]


def test_eval_gate_skips_evaluations_until_the_batch_is_right():
    cfg = dataclasses.replace(TINY, eval_every=1, eval_gate=1.01)  # never satisfied
    h = train_reversal(cfg, progress=False).history
    assert h["eval_step"] == [TINY.max_steps]  # only the final evaluation
    assert len(h["batch_exact"]) == TINY.max_steps


def test_stop_after_takes_the_first_steps_of_the_full_schedule():
    cfg = dataclasses.replace(TINY, max_steps=12, cooldown=8)  # the cooldown starts at step 4
    at_7 = {}

    def keep_step_7(step, model, loss):
        if step == 7:
            at_7.update({k: v.clone() for k, v in model.state_dict().items()})

    full = train_reversal(cfg, progress=False, on_step=keep_step_7)
    part = train_reversal(cfg, progress=False, stop_after=7)
    assert part.history["step"] == list(range(1, 8)) and part.history["eval_step"] == [3, 6, 7]
    assert part.history["lr"] == full.history["lr"][:7]  # the cooldown of 12 steps, not of 7
    assert part.history["loss"] == full.history["loss"][:7]
    # the weights after step 7 of the full run, bit for bit (chapter 10 relies on this)
    part_state = part.model.state_dict()
    assert at_7.keys() == part_state.keys()
    assert all(torch.equal(at_7[k], part_state[k]) for k in at_7)
    assert train_reversal(cfg, progress=False, stop_after=50).steps == 12  # capped by max_steps
    with pytest.raises(ValueError, match="stop_after"):
        train_reversal(cfg, progress=False, stop_after=0)


def test_threads_are_set_for_training_and_restored():
    before = torch.get_num_threads()
    wanted = 2 if before == 1 else 1  # differs from the current setting, so the test can fail
    seen = []
    real = torch.optim.Adam.step

    def spy(self, *a, **k):
        seen.append(torch.get_num_threads())
        return real(self, *a, **k)

    torch.optim.Adam.step = spy
    try:
        train_reversal(dataclasses.replace(TINY, threads=wanted), progress=False)
    finally:
        torch.optim.Adam.step = real
    assert set(seen) == {wanted} and torch.get_num_threads() == before


def test_cooldown_ramps_the_noam_factor_down_to_zero():
    cfg = dataclasses.replace(TINY, d_model=32, warmup=10, max_steps=100, cooldown=60)
    f, noam = lr_factor(cfg), noam_lambda(32, 10)
    assert all(f(s) == noam(s) for s in range(0, 41))  # untouched before the cooldown
    assert f(70) == pytest.approx(noam(70) * 0.5) and f(100) == 0.0
    assert lr_factor(dataclasses.replace(cfg, cooldown=0))(80) == noam(80)
    with pytest.raises(ValueError, match="cooldown"):
        lr_factor(dataclasses.replace(cfg, cooldown=101))


@pytest.mark.parametrize("bucket", [0, 10])
def test_epoch_batches_use_each_sequence_at_most_once(bucket):
    _, tgt = make_reversal_dataset(1000, seed=0)
    lengths = (tgt != PAD_ID).sum(1)
    batches = epoch_batches(lengths, 64, bucket, torch.Generator().manual_seed(0))
    flat = torch.cat(batches)
    assert all(b.numel() == 64 for b in batches) and len(batches) == 1000 // 64
    assert flat.unique().numel() == flat.numel()  # no sequence twice in one epoch
    spread = (
        torch.tensor([int(lengths[b].max() - lengths[b].min()) for b in batches]).float().mean()
    )
    if bucket:
        assert spread < 2  # bucketed batches hold sequences of about the same length
    else:
        assert spread > 6


def test_trimming_padding_columns_does_not_change_the_loss():
    torch.manual_seed(0)
    model = build_model(dataclasses.replace(TINY, d_model=32)).eval()
    src, tgt = make_reversal_dataset(
        16, seed=3, max_len=6
    )  # width 8, but the model's max_len is 14
    lens_s, lens_t = (src != PAD_ID).sum(1).max(), (tgt != PAD_ID).sum(1).max()

    def loss(s, t):
        logits = model(s, t[:, :-1])
        return F.cross_entropy(
            logits.reshape(-1, VOCAB_SIZE), t[:, 1:].reshape(-1), ignore_index=PAD_ID
        )

    wide_s = F.pad(src, (0, 6), value=PAD_ID)
    wide_t = F.pad(tgt, (0, 6), value=PAD_ID)
    torch.testing.assert_close(loss(wide_s, wide_t), loss(src[:, :lens_s], tgt[:, :lens_t]))


def test_teacher_forced_exact_match_equals_greedy_exact_match(partly_trained_model):
    model = partly_trained_model
    src, tgt = make_reversal_dataset(300, seed=1)
    tf = teacher_forced_exact_match(model, src, tgt)
    assert 0.02 < tf < 0.98, tf  # a partly trained model: the check is not trivially 0 or 1
    assert tf == exact_match(model, src, tgt)
    assert tf == teacher_forced_exact_match(model, src, tgt, batch_size=7)


# ---------------------------------------------------------------- checkpoint cache


def test_same_config_reuses_the_checkpoint(tmp_path, capsys):
    first = load_or_train(TINY, cache_dir=tmp_path, progress=False)
    second = load_or_train(TINY, cache_dir=tmp_path, progress=False)
    assert not first.from_cache and second.from_cache
    assert "loaded cached checkpoint" in capsys.readouterr().out
    for va, vb in zip(first.model.state_dict().values(), second.model.state_dict().values()):
        assert torch.equal(va, vb)
    assert second.history == first.history
    other = dataclasses.replace(TINY, seed=1)
    assert checkpoint_path(other, tmp_path) != checkpoint_path(TINY, tmp_path)


def test_every_field_is_part_of_the_key():
    for f in dataclasses.fields(TrainConfig):
        value = getattr(TINY, f.name)
        changed = {bool: lambda v: not v, str: lambda v: v + "x", type(None): lambda v: 0.5}.get(
            type(value), lambda v: v + 1
        )(value)
        assert dataclasses.replace(TINY, **{f.name: changed}).key() != TINY.key(), f.name


def test_truncated_checkpoint_is_detected_and_retrained(tmp_path, capsys):
    good = load_or_train(TINY, cache_dir=tmp_path, progress=False)
    path = checkpoint_path(TINY, tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # what a non-atomic writer leaves when killed
    with pytest.raises(Exception):  # noqa: B017 (torch raises RuntimeError, pickle others)
        load_checkpoint(path, TINY)
    again = load_or_train(TINY, cache_dir=tmp_path, progress=False)
    out = capsys.readouterr().out
    assert "unusable" in out and "retraining" in out
    assert not again.from_cache
    assert load_checkpoint(path, TINY).from_cache  # the rewritten file is valid
    for va, vb in zip(good.model.state_dict().values(), again.model.state_dict().values()):
        assert torch.equal(va, vb)


def test_garbage_and_wrong_config_files_are_retrained(tmp_path, capsys):
    path = checkpoint_path(TINY, tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a checkpoint at all")
    assert not load_or_train(TINY, cache_dir=tmp_path, progress=False).from_cache
    other = dataclasses.replace(TINY, seed=7)
    save_checkpoint(train_reversal(other, progress=False), path)  # right name, wrong content
    with pytest.raises(ValueError, match="different config"):
        load_checkpoint(path, TINY)
    assert not load_or_train(TINY, cache_dir=tmp_path, progress=False).from_cache
    assert capsys.readouterr().out.count("retraining") == 2


WRITER = textwrap.dedent("""
    import time, torch
    from helpers.training.checkpoints import save_checkpoint
    from helpers.training.recipes import TrainConfig
    from helpers.training.train import train_reversal
    cfg = TrainConfig(**{cfg!r})
    result = train_reversal(cfg, progress=False)
    real_save = torch.save
    def slow_save(obj, f):          # write part of the file, then hang: killed mid-write
        real_save(obj, f)
        f.flush(); f.seek(f.tell() // 2); f.truncate()
        print("writing", flush=True)
        time.sleep(60)
    torch.save = slow_save
    save_checkpoint(result, {path!r})
""")


def test_killing_the_writer_mid_write_leaves_no_valid_looking_checkpoint(tmp_path):
    path = checkpoint_path(TINY, tmp_path)
    script = WRITER.format(cfg=dataclasses.asdict(TINY), path=str(path))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "writing"
        tmp_files = list(tmp_path.glob(".*.tmp"))
        assert len(tmp_files) == 1 and tmp_files[0].stat().st_size > 0  # half a file on disk
    finally:
        proc.send_signal(signal.SIGKILL)  # no finally blocks, no cleanup: a hard crash
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert not path.exists()  # the final name never held the partial file
    res = load_or_train(TINY, cache_dir=tmp_path, progress=False, verbose=False)
    assert not res.from_cache and load_checkpoint(path, TINY).from_cache


def test_a_successful_save_leaves_no_temporary_file(tmp_path):
    res = train_reversal(TINY, progress=False)
    path = checkpoint_path(TINY, tmp_path)
    save_checkpoint(res, path)
    save_checkpoint(res, path)  # overwriting is atomic too
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_checkpoint_loads_with_weights_only(tmp_path):
    load_or_train(TINY, cache_dir=tmp_path, progress=False, verbose=False)
    payload = torch.load(checkpoint_path(TINY, tmp_path), weights_only=True)
    assert set(payload) >= {"format", "config", "state_dict", "history"}


# ---------------------------------------------------------------- recipes


def test_recipes():
    assert (
        SEED_RECIPE.d_model == 128 and SEED_RECIPE.batch_size == 64 and SEED_RECIPE.warmup == 1000
    )
    assert (
        BOOK_RECIPE.target_exact_match == 0.995
        and BOOK_RECIPE.eval_size == BOOK_RECIPE.val_size == 1000
    )
    assert (BOOK_RECIPE.train_size, BOOK_RECIPE.data_seed, BOOK_RECIPE.val_seed) == (20000, 0, 1)
    bad = default_init_recipe()
    good = fixed_budget_recipe()
    assert bad.init == "default" and good.init == "fixed"
    assert bad.max_steps == good.max_steps == COMPARISON_STEPS  # the same step budget
    assert bad.target_exact_match is None and good.target_exact_match is None  # no early stop
    assert dataclasses.replace(bad, init="fixed") == good  # only the init differs
    assert good.cooldown == COMPARISON_STEPS - BOOK_RECIPE.warmup  # the schedule keeps its shape
    assert BOOK_RECIPE.cooldown == BOOK_RECIPE.max_steps - BOOK_RECIPE.warmup


def first_batch(cfg):
    """The first batch train_reversal draws, trimmed as it trims it, and the initial model."""
    src, tgt = make_reversal_dataset(cfg.train_size, seed=cfg.data_seed)
    src_len, tgt_len = (src != PAD_ID).sum(1), (tgt != PAD_ID).sum(1)
    gen = torch.Generator().manual_seed(cfg.seed)
    idx = epoch_batches(src_len, cfg.batch_size, cfg.bucket, gen).pop()
    s = src[idx, : int(src_len[idx].max())]
    t = tgt[idx, : int(tgt_len[idx].max())]
    return build_model(cfg), s, t


def test_the_first_loss_ignores_padding():
    model, src, tgt = first_batch(TINY)
    model.train()
    logits = model(src, tgt[:, :-1]).reshape(-1, model.config.tgt_vocab)
    target = tgt[:, 1:].reshape(-1)
    assert (target == PAD_ID).any()  # the batch has padding, so the two losses differ
    ignoring = F.cross_entropy(logits, target, ignore_index=PAD_ID).item()
    counting = F.cross_entropy(logits, target).item()
    assert abs(ignoring - counting) > 1e-3
    loss = train_reversal(TINY, progress=False, confirm=False).history["loss"][0]
    assert loss == pytest.approx(ignoring, rel=1e-5)


def test_the_first_loss_is_smoothed_when_the_recipe_smooths():
    cfg = dataclasses.replace(TINY, label_smoothing=0.1)
    model, src, tgt = first_batch(cfg)
    model.train()
    logits = model(src, tgt[:, :-1]).reshape(-1, model.config.tgt_vocab)
    target = tgt[:, 1:].reshape(-1)
    smoothed = F.cross_entropy(logits, target, ignore_index=PAD_ID, label_smoothing=0.1).item()
    plain = F.cross_entropy(logits, target, ignore_index=PAD_ID).item()
    assert abs(smoothed - plain) > 1e-3  # the two losses differ on this batch
    loss = train_reversal(cfg, progress=False, confirm=False).history["loss"][0]
    assert loss == pytest.approx(smoothed, rel=1e-5)


def test_the_schedule_advances_once_per_optimizer_step():
    cfg = dataclasses.replace(TINY, warmup=3, max_steps=6)
    lrs = train_reversal(cfg, progress=False, confirm=False).history["lr"]
    factor = lr_factor(cfg)
    expected = [cfg.lr_scale * factor(step) for step in range(1, cfg.max_steps + 1)]
    assert lrs == pytest.approx(expected, rel=1e-6)
    assert len(set(expected)) == len(expected)  # distinct values: a double step would show


def test_overlap_counts_every_training_row_including_the_last():
    train = torch.tensor([[3, 4, 2, 0], [5, 6, 2, 0], [7, 8, 9, 2]])
    test = torch.tensor([[7, 8, 9, 2], [3, 4, 2, 0], [9, 9, 2, 0]])
    assert train_test_overlap(test, train).tolist() == [True, True, False]
    assert train_test_overlap(train[-1:], train).tolist() == [True]


def test_the_log_matches_a_hand_loop_over_epochs_and_the_cooldown():
    """Over 30 steps (almost four epochs of 8 batches, a cooldown from step 20), every logged
    statistic equals an independent recomputation, and the logged lr is the one the optimizer
    uses for the next step."""
    cfg = dataclasses.replace(TINY, max_steps=30, warmup=5, cooldown=10, eval_every=1000)
    run = train_reversal(cfg, progress=False, confirm=False)
    h = run.history
    assert cfg.train_size // cfg.batch_size < cfg.max_steps // 3  # several epochs are crossed

    model = build_model(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr_scale, betas=(0.9, 0.98), eps=1e-9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(cfg))
    gen = torch.Generator().manual_seed(cfg.seed)
    src_all, tgt_all = make_reversal_dataset(cfg.train_size, seed=cfg.data_seed)
    src_len, tgt_len = (src_all != PAD_ID).sum(1), (tgt_all != PAD_ID).sum(1)
    batches, used_lr, losses, token_acc, batch_exact = [], [], [], [], []
    model.train()
    for _ in range(cfg.max_steps):
        if not batches:
            batches = epoch_batches(src_len, cfg.batch_size, cfg.bucket, gen)
        idx = batches.pop()
        src = src_all[idx, : int(src_len[idx].max())]
        tgt = tgt_all[idx, : int(tgt_len[idx].max())]
        logits = model(src, tgt[:, :-1])
        labels = tgt[:, 1:]
        loss = F.cross_entropy(logits.reshape(-1, VOCAB_SIZE), labels.reshape(-1), ignore_index=0)
        used_lr.append(opt.param_groups[0]["lr"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        pred = logits.argmax(-1)
        right = [int(p[:n].eq(y[:n]).sum()) for p, y, n in zip(pred, labels, tgt_len[idx] - 1)]
        token_acc.append(sum(right) / int((tgt_len[idx] - 1).sum()))
        batch_exact.append(sum(r == n for r, n in zip(right, (tgt_len[idx] - 1).tolist())) / 32)

    assert h["loss"] == losses
    assert h["token_acc"] == pytest.approx(token_acc, abs=1e-12)
    assert h["batch_exact"] == pytest.approx(batch_exact, abs=1e-12)
    assert h["lr"][:-1] == used_lr[1:]  # logged after the step: the next step's lr
    assert used_lr[0] == cfg.lr_scale * lr_factor(cfg)(0) and h["lr"][-1] == 0.0
    state = model.state_dict()
    assert all(torch.equal(v, state[k]) for k, v in run.model.state_dict().items())


def test_scoring_the_validation_set_does_not_change_training():
    """With dropout, a run that scores the validation set at every 2nd step trains exactly as
    one that scores it only at the end: the evaluation runs in eval mode (no dropout draws),
    and training goes on in training mode afterwards (dropout back on). A loop that leaves the
    model in eval mode, or scores it in training mode, changes the later losses."""
    cfg = dataclasses.replace(TINY, dropout=0.1, max_steps=8, eval_every=1000)
    quiet = train_reversal(cfg, progress=False, confirm=False)
    busy = train_reversal(dataclasses.replace(cfg, eval_every=2), progress=False, confirm=False)
    assert busy.history["eval_step"] == [2, 4, 6, 8] and quiet.history["eval_step"] == [8]
    assert busy.history["loss"] == quiet.history["loss"]
    state = quiet.model.state_dict()
    assert all(torch.equal(v, state[k]) for k, v in busy.model.state_dict().items())


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_teacher_forced_exact_match_scores_in_eval_mode_and_restores_the_mode(mode):
    cfg = dataclasses.replace(TINY, dropout=0.5)
    model = build_model(cfg)
    model.train(mode == "train")
    src, tgt = make_reversal_dataset(64, seed=5)
    model.eval()
    with torch.no_grad():
        logits = model(src, tgt[:, :-1])
    labels = tgt[:, 1:]
    expected = ((logits.argmax(-1) == labels) | (labels == PAD_ID)).all(1).float().mean().item()
    model.train(mode == "train")
    rng = torch.get_rng_state()
    assert teacher_forced_exact_match(model, src, tgt) == expected
    assert model.training == (mode == "train")  # the caller's mode is given back
    assert torch.equal(torch.get_rng_state(), rng)  # no dropout mask was drawn


# ---------------------------------------------------------------- what both loops share


def test_the_gate_and_the_confirmation_shared_by_both_loops():
    """helpers.training.loop decides for train_reversal and train_reversal_ddp alike: evaluate
    at a multiple of eval_every whose batch passes the gate, and at the last step; stop only
    when the score reaches the target, after greedy decoding confirms it (when asked to)."""
    cfg = dataclasses.replace(TINY, eval_every=4, eval_gate=0.5, target_exact_match=0.9)
    assert evaluation_due(cfg, 8, 0.5, last=10) and not evaluation_due(cfg, 8, 0.49, last=10)
    assert not evaluation_due(cfg, 9, 1.0, last=10) and evaluation_due(cfg, 10, 0.0, last=10)
    calls = []

    def score(quick, greedy_score):
        def fn(greedy):
            calls.append(greedy)
            return greedy_score if greedy else quick

        return fn

    assert evaluate_and_confirm(cfg, score(0.8, 1.0), confirm=True) == (0.8, False)
    assert evaluate_and_confirm(cfg, score(0.9, 0.95), confirm=True) == (0.95, True)
    assert evaluate_and_confirm(cfg, score(0.95, 0.85), confirm=True) == (0.85, False)
    assert evaluate_and_confirm(cfg, score(0.95, 0.0), confirm=False) == (0.95, True)
    assert calls == [False, False, True, False, True, False]
    no_target = dataclasses.replace(cfg, target_exact_match=None)
    assert evaluate_and_confirm(no_target, score(1.0, 1.0), confirm=True) == (1.0, False)
