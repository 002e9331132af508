"""Looking at models and records: the attention heatmaps (chapter 21), the torch.nn.Transformer
comparison (chapter 15), the norm-placement experiment and the Experiments pages' statistics."""
