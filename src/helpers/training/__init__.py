"""Training the reversal model: the schedule, the recipes, the loop, the held-out test set,
the checkpoint cache (chapters 9-12) and the data-parallel loop (chapter 23)."""
