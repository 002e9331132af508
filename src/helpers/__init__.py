"""helpers: the finished, tested code that the book's chapters build by hand.

One block per chapter, in the order the book builds things; each public name appears once.
Mask convention everywhere: a bool tensor, True = blocked (may not be attended).
"""

# ruff: noqa: I001 (the imports follow the book, not the alphabet)

# 1. The task and the architecture: the vocabulary of the reversal task
from helpers.core.vocab import BOS_ID, EOS_ID, NUM_OFFSET, PAD_ID, VOCAB_SIZE, token_name
from helpers.core.data import decode_digits, describe, encode_digits
from helpers.core.device import device

# 2. Embeddings and positions
from helpers.core.embeddings import TokenAndPosition, sinusoidal_position_encoding

# 3. Multi-head attention
from helpers.core.attention import MultiHeadAttention

# 4. The feed-forward block
from helpers.core.layers import FeedForward

# 5. The encoder
from helpers.core.layers import Encoder, EncoderLayer

# 6. The decoder
from helpers.core.layers import Decoder, DecoderLayer

# 7. Masks and the full model
from helpers.core.masks import (
    from_hf_attention_mask,
    fully_masked_rows,
    make_causal_mask,
    make_padding_mask,
    to_hf_attention_mask,
    to_sdpa_mask,
)
from helpers.core.model import ModelConfig, Transformer, count_parameters, xavier_init_linears

# 8. Test before you train
from .debugging.masks import MaskCheck, check_masks

# 9. Data
from helpers.core.data import make_reversal_dataset
from helpers.training.evaluation import TEST_SEED, TEST_SIZE, test_set, train_test_overlap

# 10. Training
from helpers.training.schedule import noam_lambda
from helpers.training.recipes import BOOK_RECIPE, SEED_RECIPE, TrainConfig
from helpers.training.train import TrainResult, teacher_forced_exact_match, train_reversal
from helpers.training.checkpoints import load_or_train, trained_reversal_model
from helpers.training.evaluation import Interval, exact_match_with_interval, wilson_interval

# 11. Greedy decoding
from helpers.decoding.greedy import exact_match, greedy_decode, restores_mode, sequences_equal

# 12. When correct code learns slowly
from helpers.core.model import apply_default_init
from helpers.training.recipes import COMPARISON_STEPS, default_init_recipe, fixed_budget_recipe
from helpers.training.checkpoints import trained_default_init_model, trained_fixed_budget_model

# 13. The KV cache (the growing cache is in DecoderLayer; a preallocated one here)
from helpers.decoding.static_cache import StaticCaches, allocate_static_caches, greedy_decode_static

# 14. A decoder-only mini GPT
from .gpt import (
    CharTokenizer,
    GPTBlock,
    GPTConfig,
    MiniGPT,
    generate,
    load_corpus,
    next_token,
    top_k_filter,
    top_p_filter,
    train_gpt,
)

# 15. Checked against torch.nn.Transformer
from helpers.analysis.torch_reference import (
    copy_attention,
    to_torch_transformer,
    torch_forward,
    torch_mask_arguments,
)

# 17. Pitfalls and debugging
from .debugging import Finding, ModelReport, check_model, compare_with_band

# 20. Beam search on the KV cache (exercise 11.3's search, batched, on chapter 13's cache)
from helpers.decoding.beam_search import beam_search

# 21. Cross-attention heatmaps
from helpers.analysis.visualize import (
    MEAN_OF_HEADS,
    AttentionExplorer,
    AttentionMap,
    alignment_stats,
    attention_sharpness,
    cross_attention,
    mirror_weight_batch,
    mirrored_columns,
    parse_digits,
    plot_attention,
    plot_attention_grid,
)
from helpers.training.recipes import SHARP_ATTENTION_RECIPE

# 22. The attention benchmark
from .benchmark import (
    Workload,
    cpu_peak_bytes,
    load_results,
    measure,
    results_table,
    score_matrix_bytes,
    sweep,
)

# 23. Distributed data parallel
from helpers.training.distributed import (
    LaunchError,
    init_distributed,
    rank_batches,
    train_reversal_ddp,
)

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "NUM_OFFSET",
    "PAD_ID",
    "VOCAB_SIZE",
    "token_name",
    "decode_digits",
    "describe",
    "encode_digits",
    "device",
    "TokenAndPosition",
    "sinusoidal_position_encoding",
    "MultiHeadAttention",
    "FeedForward",
    "Encoder",
    "EncoderLayer",
    "Decoder",
    "DecoderLayer",
    "from_hf_attention_mask",
    "fully_masked_rows",
    "make_causal_mask",
    "make_padding_mask",
    "to_hf_attention_mask",
    "to_sdpa_mask",
    "ModelConfig",
    "Transformer",
    "count_parameters",
    "xavier_init_linears",
    "MaskCheck",
    "check_masks",
    "make_reversal_dataset",
    "TEST_SEED",
    "TEST_SIZE",
    "test_set",
    "train_test_overlap",
    "noam_lambda",
    "BOOK_RECIPE",
    "SEED_RECIPE",
    "TrainConfig",
    "TrainResult",
    "teacher_forced_exact_match",
    "train_reversal",
    "load_or_train",
    "trained_reversal_model",
    "Interval",
    "exact_match_with_interval",
    "wilson_interval",
    "exact_match",
    "greedy_decode",
    "greedy_decode_static",
    "allocate_static_caches",
    "StaticCaches",
    "beam_search",
    "restores_mode",
    "sequences_equal",
    "apply_default_init",
    "COMPARISON_STEPS",
    "default_init_recipe",
    "fixed_budget_recipe",
    "trained_default_init_model",
    "trained_fixed_budget_model",
    "CharTokenizer",
    "GPTBlock",
    "GPTConfig",
    "MiniGPT",
    "generate",
    "load_corpus",
    "next_token",
    "top_k_filter",
    "top_p_filter",
    "train_gpt",
    "copy_attention",
    "to_torch_transformer",
    "torch_forward",
    "torch_mask_arguments",
    "Finding",
    "ModelReport",
    "check_model",
    "compare_with_band",
    "MEAN_OF_HEADS",
    "AttentionExplorer",
    "AttentionMap",
    "attention_sharpness",
    "cross_attention",
    "mirrored_columns",
    "parse_digits",
    "plot_attention",
    "plot_attention_grid",
    "alignment_stats",
    "mirror_weight_batch",
    "SHARP_ATTENTION_RECIPE",
    "Workload",
    "cpu_peak_bytes",
    "load_results",
    "measure",
    "results_table",
    "score_matrix_bytes",
    "sweep",
    "LaunchError",
    "init_distributed",
    "rank_batches",
    "train_reversal_ddp",
]
