"""Turning a trained model into outputs: greedy decoding (chapter 11), the preallocated KV cache
(chapter 13) and beam search on the cache."""
