"""Training recipes: every setting that determines a trained reversal model, in one frozen
dataclass, and the named recipes the book uses. Built in chapter 10.

TrainConfig   the settings; the same config always gives the same weights (and checkpoint);
SEED_RECIPE   the reference chapter's recipe (d_model 128, 10 epochs), for comparison;
BOOK_RECIPE   the fast CPU recipe the book trains with (chapter 10 measures each change);
fixed_budget_recipe, default_init_recipe   the fixed-budget twins chapter 12 compares;
EmbeddingScaleConfig, embedding_scale_recipe   chapter 12's recipes whose model scales its
              token embeddings and position codes otherwise (TokenAndPosition's options).
BlocksConfig, blocks_recipe   part "Today's Transformer": a recipe whose model uses today's
              blocks (RMSNorm, SwiGLU, RoPE or ALiBi, grouped-query attention).

"The reference chapter" in this module is the textbook chapter this book reproduces and measures
itself against; the book's introduction describes it (chapters/intro.md, "The reference
chapter").
"""

import dataclasses
import hashlib
import json
from dataclasses import dataclass

CHECKPOINT_FORMAT = 2  # bump when the training code changes what a config produces


@dataclass(frozen=True)
class TrainConfig:
    """Built in chapter 10. Everything that determines the trained weights: the same config
    gives the same weights and the same checkpoint file.

    The defaults are the reference chapter's recipe (SEED_RECIPE); BOOK_RECIPE is the fast one.
    """

    d_model: int = 128
    num_heads: int = 4
    dff: int = 512
    num_layers: int = 2
    dropout: float = 0.1
    init: str = "fixed"  # "fixed": scaled embeddings + Xavier; "default": PyTorch defaults
    #                      (chapter 12 also uses "embedding_only" and "xavier_only": one fix each)
    train_size: int = 20000
    val_size: int = 1000
    data_seed: int = 0
    val_seed: int = 1
    seed: int = 0
    batch_size: int = 64
    warmup: int = 1000
    lr_scale: float = 1.0  # multiplies the Noam factor: peak lr = lr_scale * d^-0.5 * warmup^-0.5
    cooldown: int = 0  # the last `cooldown` steps before max_steps ramp the lr linearly down to 0
    label_smoothing: float = 0.0
    max_steps: int = 3120  # 10 epochs of 312 full batches of 64
    eval_every: int = 312  # steps between evaluations on the validation set (312 = one epoch)
    eval_gate: float = 0.0  # evaluate only when the training batch is at least this exactly right
    eval_size: int = 1000  # validation sequences used by the periodic evaluation
    target_exact_match: float | None = None  # stop once validation exact match reaches it
    seq_len: int = 14  # max_len of the model = 12 digits + <bos>/<eos>
    threads: int = 0  # torch threads while training; 0 leaves torch's default (thread count
    #                   changes the order of float sums, hence the low bits of the weights)
    bucket: int = 0  # 0: shuffled batches; n: sort every n batches' worth of sequences by length
    bf16: bool = False  # run the forward pass under torch.autocast("cpu", bfloat16)
    compile: bool = False  # torch.compile the model for the training steps

    def key(self) -> str:
        blob = json.dumps({"format": CHECKPOINT_FORMAT, **dataclasses.asdict(self)}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


# The reference chapter's recipe: d_model 128, batch 64, warmup 1000, dropout 0.1, 10 epochs,
# one evaluation per epoch.
SEED_RECIPE = TrainConfig()

# The recipe the book trains with. Chapter 10 measures each change against SEED_RECIPE
# (tools/bench/training.py): a 60,781-parameter model (d_model 32), no dropout, batch 128, a
# short warmup and a linear cooldown to 0 at step 500, one thread, and a cheap evaluation at
# every 10th step whose training batch is at least 98 % exactly right. It stops at 99.5 %.
BOOK_RECIPE = TrainConfig(
    d_model=32,
    num_heads=4,
    dff=128,
    num_layers=2,
    dropout=0.0,
    batch_size=128,
    warmup=100,
    lr_scale=1.0,
    cooldown=400,
    max_steps=500,
    eval_every=10,
    eval_gate=0.98,
    target_exact_match=0.995,
    threads=1,
)

# Chapter 12 compares initialisations on one fixed budget, with no early stop for either model.
COMPARISON_STEPS = 300


def fixed_budget_recipe(
    recipe: TrainConfig = BOOK_RECIPE, init: str = "fixed", steps: int = COMPARISON_STEPS
) -> TrainConfig:
    """Built in chapter 12. recipe trained for exactly `steps` steps with the given init: no
    early stop, an evaluation every 20 steps, and (if recipe has a cooldown) the cooldown
    rescaled so that it still starts where the warmup ends."""
    cooldown = steps - recipe.warmup if recipe.cooldown else 0
    return dataclasses.replace(
        recipe,
        init=init,
        max_steps=steps,
        cooldown=cooldown,
        target_exact_match=None,
        eval_every=20,
        eval_gate=0.0,
    )


def default_init_recipe(recipe: TrainConfig = BOOK_RECIPE) -> TrainConfig:
    """Built in chapter 12. PyTorch's default initialisation, otherwise the book's recipe on the
    comparison budget."""
    return fixed_budget_recipe(recipe, init="default")


@dataclass(frozen=True)
class EmbeddingScaleConfig(TrainConfig):
    """Built in chapter 12. A TrainConfig whose model multiplies its token embeddings by
    token_scale (None: sqrt(d_model), as every other recipe) and its position codes by
    position_scale (TokenAndPosition's two options). A subclass, so that the fields, keys and
    checkpoints of every other recipe stay as they were."""

    token_scale: float | None = None
    position_scale: float = 1.0


def embedding_scale_recipe(
    recipe: TrainConfig, token_scale: float | None = None, position_scale: float = 1.0
) -> EmbeddingScaleConfig:
    """Built in chapter 12. recipe, with the model's token and position scales set."""
    fields = {f.name: getattr(recipe, f.name) for f in dataclasses.fields(TrainConfig)}
    return EmbeddingScaleConfig(**fields, token_scale=token_scale, position_scale=position_scale)


# Chapter 21's model, whose cross-attention map comes close to the reference chapter's
# (tools/record/ch21_sharpness.py recorded the search, one seed per lever and three seeds of
# this recipe, into chapters/data/ch21_sharpness.json; appendix/experiment_sharp_attention):
# two heads of d_k 32 (d_model 64), dropout 0.15, lr_scale 2 (a peak learning rate 1.41 times the
# book's, since the Noam factor falls as d_model^-1/2), and a
# fixed budget of 1000 steps with the cooldown to 0 at the end (no early stop).
SHARP_ATTENTION_RECIPE = dataclasses.replace(
    BOOK_RECIPE,
    d_model=64,
    num_heads=2,
    dff=256,
    dropout=0.15,
    lr_scale=2.0,
    max_steps=1000,
    cooldown=900,
    eval_every=100,
    eval_gate=0.0,
    target_exact_match=None,
)


@dataclass(frozen=True)
class BlocksConfig(TrainConfig):
    """A TrainConfig whose model uses today's blocks (ModelConfig's options; part "Today's
    Transformer"). A subclass, so that every other recipe keeps its fields, key and checkpoint.
    The defaults are the 2017 blocks: BlocksConfig with no option set builds the same model as
    its TrainConfig, under another checkpoint key.

    norm "layer" | "rms"; ffn "gelu" | "relu" | "swiglu"; positions "sinusoidal" | "learned" |
    "rope" | "alibi"; rope_layout "half" | "interleaved"; num_kv_heads None (= num_heads) or a
    divisor of num_heads (grouped-query attention; 1 is multi-query).
    """

    norm: str = "layer"
    ffn: str = "gelu"
    positions: str = "sinusoidal"
    rope_layout: str = "half"
    num_kv_heads: int | None = None

    def model_options(self) -> dict:
        """The Transformer keyword arguments of today's blocks."""
        return {
            "norm": self.norm,
            "ffn": self.ffn,
            "positions": self.positions,
            "rope_layout": self.rope_layout,
            "num_kv_heads": self.num_kv_heads,
        }


def blocks_recipe(recipe: TrainConfig = BOOK_RECIPE, **options) -> BlocksConfig:
    """recipe, with today's blocks set by keyword (norm, ffn, positions, rope_layout,
    num_kv_heads) and any TrainConfig field replaced (for example seed or seq_len)."""
    fields = {f.name: getattr(recipe, f.name) for f in dataclasses.fields(recipe)}
    unknown = set(options) - {f.name for f in dataclasses.fields(BlocksConfig)}
    if unknown:
        raise TypeError(f"blocks_recipe got unknown options {sorted(unknown)}")
    return BlocksConfig(**{**fields, **options})
