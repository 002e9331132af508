"""The model the book builds in chapters 1-8, readable in one sitting: the task's vocabulary and
data, embeddings, attention, the layers, the masks, the Transformer, and its input checks."""
