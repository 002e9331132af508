"""Data-parallel training (chapter 23): two gloo processes started by torchrun compute the same
step as one process on the whole batch, and train_reversal_ddp's first steps on two processes
equal its steps in one (so each rank scales its loss by the global token count); each rank
draws its own dropout stream from the same initial weights; rank 0 alone writes the checkpoint;
bad launches stop with a clear message."""

import dataclasses
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers.core.data import make_reversal_dataset
from helpers.training.checkpoints import load_checkpoint
from helpers.training.distributed import (
    DistInfo,
    LaunchError,
    init_distributed,
    one_step_single,
    port_is_free,
    rank_batches,
    save_on_rank0,
    seed_rank_stream,
    torchrun_command,
    train_reversal_ddp,
)
from helpers.training.recipes import BOOK_RECIPE
from helpers.training.train import build_model

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "train_ddp.py"
ONE_STEP_ROWS = 64  # as in tools/train_ddp.py


def run(cmd, env=None):
    env = dict(os.environ if env is None else env, OMP_NUM_THREADS="1")
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.fixture(scope="module")
def one_step(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    r = run(torchrun_command(SCRIPT, 2, "--out", str(out), "--one-step"))
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def test_ddp_step_equals_one_process_on_the_whole_batch(one_step):
    src, tgt = make_reversal_dataset(ONE_STEP_ROWS, seed=BOOK_RECIPE.data_seed)
    model, grads, loss = one_step_single(BOOK_RECIPE, src, tgt)
    ddp = torch.load(one_step / "grads.pt")
    ckpt = torch.load(one_step / "model.pt")
    assert ddp["loss"] == pytest.approx(loss, rel=1e-6)
    for name, g in grads.items():
        torch.testing.assert_close(ddp["grads"][name], g, rtol=1e-5, atol=1e-7)
    for name, p in model.state_dict().items():
        if name.endswith("W_k.bias"):
            # Its gradient is 0 in exact arithmetic (softmax ignores a shift shared by every
            # key), rounding noise in floats; Adam's first step divides it by its own size, so
            # each run moves it by up to about lr = 1.8e-4, in directions set by rounding.
            assert grads[name].abs().max() < 1e-7
            torch.testing.assert_close(ckpt["state_dict"][name], p, rtol=0, atol=2e-4)
        else:
            torch.testing.assert_close(ckpt["state_dict"][name], p, rtol=1e-5, atol=1e-7)


def test_rank0_alone_writes_the_checkpoint(one_step):
    ranks = json.loads((one_step / "result.json").read_text())
    assert [r["wrote_checkpoint"] for r in ranks] == [True, False]
    assert [r["replicas_max_diff"] for r in ranks] == [0.0, 0.0]
    assert sorted(p.name for p in one_step.glob("*.pt")) == ["grads.pt", "model.pt"]


FEW_STEPS = 3


@pytest.fixture(scope="module")
def few_steps(tmp_path_factory):
    """train_reversal_ddp for FEW_STEPS steps of the book's recipe on two processes."""
    out = tmp_path_factory.mktemp("ddp_steps")
    args = ("--out", str(out), "--max-steps", str(FEW_STEPS), "--log-every", "0")
    r = run(torchrun_command(SCRIPT, 2, *args))
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def test_ddp_training_steps_equal_one_process(few_steps):
    # Each rank's half of a batch holds its own number of real tokens. Scaling a rank's loss by
    # its own count instead of the global one changes these weights by up to ~1e-3; rounding
    # alone moves them by ~5e-8.
    cfg = dataclasses.replace(
        BOOK_RECIPE, max_steps=FEW_STEPS, cooldown=0, target_exact_match=None, threads=1
    )
    one = train_reversal_ddp(cfg).model.state_dict()
    two = torch.load(few_steps / "model.pt")["state_dict"]
    for name, p in one.items():
        # the key biases' gradient is rounding noise (see the one-step test): Adam moves them
        # by up to about the learning rate in a direction set by that noise
        atol = 1e-3 if name.endswith("W_k.bias") else 1e-6
        torch.testing.assert_close(two[name], p, rtol=1e-5, atol=atol, msg=name)


def test_each_rank_draws_its_own_dropout_stream(few_steps):
    ranks = json.loads((few_steps / "result.json").read_text())
    assert ranks[0]["stream_seed"] == BOOK_RECIPE.seed  # rank 0: train_reversal's own stream
    assert ranks[1]["stream_seed"] != ranks[0]["stream_seed"]


def test_seed_rank_stream_keeps_rank0_and_the_weights():
    cfg = dataclasses.replace(BOOK_RECIPE, dropout=0.1)
    masks, weights = [], []
    for rank in (None, 0, 1):  # None: one process, as helpers.train_reversal runs
        model = build_model(cfg)
        if rank is not None:
            seed_rank_stream(cfg, rank)
        weights.append(model.state_dict())
        masks.append(torch.nn.functional.dropout(torch.ones(64), p=0.5))
    assert torch.equal(masks[0], masks[1]) and not torch.equal(masks[1], masks[2])
    for name, w in weights[0].items():
        assert torch.equal(weights[2][name], w)


def test_save_on_rank0_skips_other_ranks(tmp_path):
    model = build_model(BOOK_RECIPE)
    other = DistInfo(rank=1, world_size=2, local_rank=1, device=torch.device("cpu"))
    assert save_on_rank0(model, BOOK_RECIPE, tmp_path / "m.pt", other) is None
    assert not (tmp_path / "m.pt").exists()
    main = DistInfo(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    assert save_on_rank0(model, BOOK_RECIPE, tmp_path / "m.pt", main) == str(tmp_path / "m.pt")
    assert set(torch.load(tmp_path / "m.pt")["state_dict"]) == set(model.state_dict())


def test_save_on_rank0_writes_a_checkpoint_load_checkpoint_reads(tmp_path):
    """The DDP run's checkpoint is a format-valid cache file: load_checkpoint refuses a file
    without its "format" key, which save_on_rank0 used to leave out."""
    model = build_model(BOOK_RECIPE)
    main = DistInfo(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    path = save_on_rank0(model, BOOK_RECIPE, tmp_path / "m.pt", main, history={"step": [1]})
    loaded = load_checkpoint(Path(path), BOOK_RECIPE)
    assert loaded.history == {"step": [1]}
    for name, w in model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], w), name


def torchrun_env(world_size: int, port: int) -> dict:
    env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE=str(world_size))
    return dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))


def test_one_process_is_refused(tmp_path):
    r = run([sys.executable, str(SCRIPT), "--out", str(tmp_path)], torchrun_env(1, 29511))
    assert r.returncode == 2
    assert "WORLD_SIZE=1: data-parallel training needs at least 2 processes" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_port_in_use_is_named(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert not port_is_free(port)
        r = run([sys.executable, str(SCRIPT), "--out", str(tmp_path)], torchrun_env(2, port))
    assert r.returncode == 2
    assert f"MASTER_PORT={port} on 127.0.0.1 is already in use" in r.stderr
    assert "Traceback" not in r.stderr


def test_without_torchrun(monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(LaunchError, match="not set: start this script with torchrun"):
        init_distributed()


def test_rank_batches_split_the_global_batches():
    one = rank_batches(1000, 128, 1, 0, seed=3, epoch=2)
    two = [rank_batches(1000, 128, 2, r, seed=3, epoch=2) for r in range(2)]
    assert len(one) == len(two[0]) == len(two[1]) == 1000 // 128
    for k, batch in enumerate(one):
        assert sorted(torch.cat([two[0][k], two[1][k]]).tolist()) == sorted(batch.tolist())
    assert rank_batches(1000, 128, 1, 0, seed=3, epoch=3)[0].tolist() != one[0].tolist()
    with pytest.raises(ValueError, match="not divisible by world_size=3"):
        rank_batches(1000, 128, 3, 0, seed=0, epoch=0)


def test_torchrun_command():
    cmd = torchrun_command("t.py", 2, "--x", "1")
    assert cmd[:4] == [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    assert cmd[-4:] == ["--nproc_per_node=2", "t.py", "--x", "1"]
    fixed = torchrun_command("t.py", 4, port=29600)
    assert "--master_port=29600" in fixed and "--standalone" not in fixed
