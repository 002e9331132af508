"""helpers: the finished, tested code that the book's chapters build by hand.

Mask convention everywhere: a bool tensor, True = blocked (may not be attended).
"""

from .attention import MultiHeadAttention
from .data import decode_digits, describe, encode_digits, make_reversal_dataset
from .decoding import exact_match, greedy_decode, sequences_equal
from .embeddings import TokenAndPosition, sinusoidal_position_encoding
from .layers import Decoder, DecoderLayer, Encoder, EncoderLayer, FeedForward
from .masks import (
    from_hf_attention_mask,
    fully_masked_rows,
    make_causal_mask,
    make_padding_mask,
    to_hf_attention_mask,
    to_sdpa_mask,
)
from .model import Transformer, apply_default_init, count_parameters, xavier_init_linears
from .schedule import noam_lambda
from .torch_reference import to_torch_transformer, torch_forward
from .training import (
    BOOK_RECIPE,
    TrainConfig,
    TrainResult,
    default_init_recipe,
    load_or_train,
    train_reversal,
    trained_default_init_model,
    trained_reversal_model,
)
from .vocab import BOS_ID, EOS_ID, NUM_OFFSET, PAD_ID, VOCAB_SIZE, token_name

# Modules added by later chapters register their public names below (one import line each).
from .visualize import MEAN_OF_HEADS, AttentionExplorer, AttentionMap, attention_sharpness, cross_attention, mirrored_columns, parse_digits, plot_attention, plot_attention_grid  # noqa: E501
from .benchmark import Workload, cpu_peak_bytes, load_results, measure, results_table, score_matrix_bytes, sweep  # noqa: E501
from .debugging import Finding, ModelReport, check_model  # noqa: E501
from .gpt import CharTokenizer, GPTBlock, MiniGPT, generate, load_corpus, next_token, top_k_filter, train_gpt  # noqa: E501
from .training import COMPARISON_STEPS, SEED_RECIPE, fixed_budget_recipe, teacher_forced_exact_match, trained_fixed_budget_model  # noqa: E501
