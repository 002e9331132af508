"""Plausible wrong answers to chapter 20's exercise 20.3 (reorder the self-attention cache by
parent beam). Not collected by pytest (the name does not start with test_).

EXERCISE_MISTAKES: name -> (reorder_caches, a fragment of the message the checker must give).
"""

import torch


def book(caches, parent):
    """The book's answer."""
    B, k = parent.shape
    rows = (torch.arange(B)[:, None] * k + parent).view(-1)
    for cache in caches:
        cache["self_k"] = cache["self_k"].index_select(0, rows)
        cache["self_v"] = cache["self_v"].index_select(0, rows)


def not_reordered(caches, parent):
    """Nothing done: each row keeps its own past."""


def local_index(caches, parent):
    """parent used as global rows: every source reads source 0's beams."""
    rows = parent.reshape(-1)
    for cache in caches:
        cache["self_k"] = cache["self_k"].index_select(0, rows)
        cache["self_v"] = cache["self_v"].index_select(0, rows)


def source_major(caches, parent):
    """Rows laid out as w * B + b."""
    B, k = parent.shape
    rows = (parent * B + torch.arange(B)[:, None]).reshape(-1)
    for cache in caches:
        cache["self_k"] = cache["self_k"].index_select(0, rows)
        cache["self_v"] = cache["self_v"].index_select(0, rows)


def keys_only(caches, parent):
    """The values stay behind."""
    B, k = parent.shape
    rows = (torch.arange(B)[:, None] * k + parent).view(-1)
    for cache in caches:
        cache["self_k"] = cache["self_k"].index_select(0, rows)


def sequence_axis(caches, parent):
    """index_select on the positions (dim 2) instead of the rows."""
    B, k = parent.shape
    rows = (torch.arange(B)[:, None] * k + parent).view(-1)
    for cache in caches:
        cache["self_k"] = cache["self_k"].index_select(2, rows)
        cache["self_v"] = cache["self_v"].index_select(2, rows)


def returns_new_dicts(caches, parent):
    """New dicts returned; the list the decoder holds is unchanged."""
    B, k = parent.shape
    rows = (torch.arange(B)[:, None] * k + parent).view(-1)
    return [
        {
            **c,
            "self_k": c["self_k"].index_select(0, rows),
            "self_v": c["self_v"].index_select(0, rows),
        }
        for c in caches
    ]


def cross_reordered_by_local_index(caches, parent):
    """The right self-attention rows, and the cross-attention ones moved across sources."""
    book(caches, parent)
    rows = parent.reshape(-1)
    for cache in caches:
        cache["cross_k"] = cache["cross_k"].index_select(0, rows)
        cache["cross_v"] = cache["cross_v"].index_select(0, rows)


def shape_changed(caches, parent):
    """One row per source kept instead of one per beam."""
    B, k = parent.shape
    rows = torch.arange(B) * k + parent[:, 0]
    for cache in caches:
        cache["self_k"] = cache["self_k"].index_select(0, rows)
        cache["self_v"] = cache["self_v"].index_select(0, rows)


def first_layer_only(caches, parent):
    """Only the first decoder layer's dict reordered."""
    B, k = parent.shape
    rows = (torch.arange(B)[:, None] * k + parent).view(-1)
    cache = caches[0]
    cache["self_k"] = cache["self_k"].index_select(0, rows)
    cache["self_v"] = cache["self_v"].index_select(0, rows)


def new_list_not_returned(caches, parent):
    """The name caches rebound to a new list inside the function: the caller's list unchanged."""
    B, k = parent.shape
    rows = (torch.arange(B)[:, None] * k + parent).view(-1)
    caches = [{**c, "self_k": c["self_k"][rows], "self_v": c["self_v"][rows]} for c in caches]


EXERCISE_MISTAKES = {
    "not_reordered": (not_reordered, "the caches are as they were"),
    "local_index": (local_index, "b * k + parent[b, w]"),
    "source_major": (source_major, "not w * B + b"),
    "keys_only": (keys_only, "but not the values"),
    "sequence_axis": (sequence_axis, "along the sequence axis"),
    "returns_new_dicts": (returns_new_dicts, "change the dicts in the list"),
    "cross_reordered_by_local_index": (cross_reordered_by_local_index, "cross-attention cache"),
    "shape_changed": (shape_changed, "has shape"),
    "first_layer_only": (first_layer_only, "were not reordered"),
}
