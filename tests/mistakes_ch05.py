"""The catalogue of plausible wrong answers to chapter 5's implement exercises.

Not collected by pytest (the name does not start with test_): tests/test_exercises_ch05.py
shows each one rejected by its checker with its own message, and tests/plant_mistake.py
plants them into the library to see whether its unit tests notice.

- RMSNorm (5.3) and LayerNorm (5.4) mistakes are `forward(self, x)` methods of a module that
  has `weight`, `eps` (and `bias`); a LayerNorm mistake also plants as `nn.LayerNorm.forward`.
- Encoder-layer mistakes (5.5) are `forward(layer, x, pad_mask, need_weights=True)`: the
  exercise's fn, and planted, `helpers.EncoderLayer.forward`.
- Encoder-stack mistakes (5.5, second part) are `forward(self, src, pad_mask,
  need_weights=False)`: the exercise's fn, and planted, `helpers.Encoder.forward`.
"""

import torch
import torch.nn.functional as F

# --- RMSNorm (exercise 5.3) ---


def rms_correct(self, x):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rms_centred(self, x):  # that is LayerNorm without its bias
    c = x - x.mean(-1, keepdim=True)
    return c / torch.sqrt(c.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rms_eps_outside(self, x):
    return x / (x.pow(2).mean(-1, keepdim=True).sqrt() + self.eps) * self.weight


def rms_no_weight(self, x):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def rms_batch_dim(self, x):
    return x / torch.sqrt(x.pow(2).mean(0, keepdim=True) + self.eps) * self.weight


def rms_sum_not_mean(self, x):  # the L2 norm
    return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + self.eps) * self.weight


def rms_std(self, x):
    return x / (x.std(-1, keepdim=True) + self.eps) * self.weight


def rms_no_sqrt(self, x):
    return x / (x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rms_no_eps(self, x):
    return x / x.pow(2).mean(-1, keepdim=True).sqrt() * self.weight


# --- LayerNorm (exercise 5.4) ---


def _normalise(self, x, dim=-1, unbiased=False):
    mean = x.mean(dim, keepdim=True)
    var = x.var(dim, keepdim=True, unbiased=unbiased)
    return (x - mean) / torch.sqrt(var + self.eps)


def ln_correct(self, x):
    return _normalise(self, x) * self.weight + self.bias


def ln_unbiased(self, x):
    return _normalise(self, x, unbiased=True) * self.weight + self.bias


def ln_eps_outside(self, x):
    c = x - x.mean(-1, keepdim=True)
    return c / (x.var(-1, keepdim=True, unbiased=False).sqrt() + self.eps) * self.weight + self.bias


def ln_std_plus_eps(self, x):  # The Annotated Transformer's LayerNorm
    c = x - x.mean(-1, keepdim=True)
    return c / (x.std(-1, keepdim=True) + self.eps) * self.weight + self.bias


def ln_batch_dim(self, x):
    return _normalise(self, x, dim=0) * self.weight + self.bias


def ln_sequence_dim(self, x):
    return _normalise(self, x, dim=-2) * self.weight + self.bias


def ln_not_centred(self, x):  # RMSNorm with a bias
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight + self.bias


def ln_numerator_not_centred(self, x):
    var = x.var(-1, keepdim=True, unbiased=False)
    return x / torch.sqrt(var + self.eps) * self.weight + self.bias


def ln_variance_around_zero(self, x):  # mean(x**2) where the variance is mean((x - mean)**2)
    c = x - x.mean(-1, keepdim=True)
    return c / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight + self.bias


def ln_no_eps(self, x):
    c = x - x.mean(-1, keepdim=True)
    return c / x.var(-1, keepdim=True, unbiased=False).sqrt() * self.weight + self.bias


def ln_weight_bias_swapped(self, x):
    return _normalise(self, x) * self.bias + self.weight


def ln_no_bias(self, x):
    return _normalise(self, x) * self.weight


def ln_no_weight(self, x):
    return _normalise(self, x) + self.bias


def ln_shift_before_scale(self, x):
    return (_normalise(self, x) + self.bias) * self.weight


# --- The Pre-Norm encoder layer (exercise 5.5) ---


def enc_correct(layer, x, pad_mask, need_weights=True):
    h = layer.ln1(x)
    a, w = layer.mha(h, h, h, attn_mask=pad_mask, need_weights=need_weights)
    x = x + layer.drop(a)
    x = x + layer.ffn(layer.ln2(x))
    return x, w


def enc_post_norm(layer, x, pad_mask, need_weights=True):
    a, w = layer.mha(x, x, x, attn_mask=pad_mask, need_weights=need_weights)
    x = layer.ln1(x + layer.drop(a))
    return layer.ln2(x + layer.ffn(x)), w


def enc_no_attention_residual(layer, x, pad_mask, need_weights=True):
    h = layer.ln1(x)
    a, w = layer.mha(h, h, h, attn_mask=pad_mask, need_weights=need_weights)
    x = layer.drop(a)
    return x + layer.ffn(layer.ln2(x)), w


def enc_no_ffn_residual(layer, x, pad_mask, need_weights=True):
    h = layer.ln1(x)
    a, w = layer.mha(h, h, h, attn_mask=pad_mask, need_weights=need_weights)
    x = x + layer.drop(a)
    return layer.ffn(layer.ln2(x)), w


def enc_residual_from_normalised(layer, x, pad_mask, need_weights=True):
    h = layer.ln1(x)
    a, w = layer.mha(h, h, h, attn_mask=pad_mask, need_weights=need_weights)
    x = h + layer.drop(a)
    return x + layer.ffn(layer.ln2(x)), w


def enc_one_layernorm(layer, x, pad_mask, need_weights=True):
    h = layer.ln1(x)
    a, w = layer.mha(h, h, h, attn_mask=pad_mask, need_weights=need_weights)
    x = x + layer.drop(a)
    return x + layer.ffn(layer.ln1(x)), w


def enc_no_pad_mask(layer, x, pad_mask, need_weights=True):
    return enc_correct(layer, x, None, need_weights)


def enc_dropout_on(layer, x, pad_mask, need_weights=True):
    h = layer.ln1(x)
    a, w = layer.mha(h, h, h, attn_mask=pad_mask, need_weights=need_weights)
    x = x + F.dropout(a, p=0.1)  # F.dropout's training=True by default, whatever eval() says
    return x + layer.ffn(layer.ln2(x)), w


def enc_ffn_unnormalised(layer, x, pad_mask, need_weights=True):
    h = layer.ln1(x)
    a, w = layer.mha(h, h, h, attn_mask=pad_mask, need_weights=need_weights)
    x = x + layer.drop(a)
    return x + layer.ffn(x), w


def enc_attention_unnormalised(layer, x, pad_mask, need_weights=True):
    a, w = layer.mha(x, x, x, attn_mask=pad_mask, need_weights=need_weights)
    x = x + layer.drop(a)
    return x + layer.ffn(layer.ln2(x)), w


def enc_layernorms_swapped(layer, x, pad_mask, need_weights=True):
    h = layer.ln2(x)
    a, w = layer.mha(h, h, h, attn_mask=pad_mask, need_weights=need_weights)
    x = x + layer.drop(a)
    return x + layer.ffn(layer.ln1(x)), w


def enc_mask_inverted(layer, x, pad_mask, need_weights=True):  # True = keep, the SDPA convention
    inverted = None if pad_mask is None else ~pad_mask
    return enc_correct(layer, x, inverted, need_weights)


def enc_no_residual_dropout(layer, x, pad_mask, need_weights=True):  # eval mode cannot see it
    h = layer.ln1(x)
    a, w = layer.mha(h, h, h, attn_mask=pad_mask, need_weights=need_weights)
    x = x + a
    return x + layer.ffn(layer.ln2(x)), w


def enc_final_layernorm(layer, x, pad_mask, need_weights=True):
    x, w = enc_correct(layer, x, pad_mask, need_weights)
    return F.layer_norm(x, x.shape[-1:]), w


# --- The encoder stack (exercise 5.5, second part; planted as helpers.Encoder.forward) ---


def encoder_correct(self, src, pad_mask, need_weights=False):
    x = self.embed(src)
    for layer in self.layers:
        x, _ = layer(x, pad_mask, need_weights=need_weights)
    return self.ln_final(x)


def encoder_no_final_ln(self, src, pad_mask, need_weights=False):
    x = self.embed(src)
    for layer in self.layers:
        x, _ = layer(x, pad_mask, need_weights=need_weights)
    return x


def encoder_ln_every_layer(self, src, pad_mask, need_weights=False):
    x = self.embed(src)
    for layer in self.layers:
        x, _ = layer(x, pad_mask, need_weights=need_weights)
        x = self.ln_final(x)
    return x


def encoder_no_pad_mask(self, src, pad_mask, need_weights=False):
    return encoder_correct(self, src, None, need_weights)


def encoder_layers_read_embedding(self, src, pad_mask, need_weights=False):
    emb = self.embed(src)
    for layer in self.layers:
        x, _ = layer(emb, pad_mask, need_weights=need_weights)
    return self.ln_final(x)


def encoder_layers_reversed(self, src, pad_mask, need_weights=False):
    x = self.embed(src)
    for layer in reversed(self.layers):
        x, _ = layer(x, pad_mask, need_weights=need_weights)
    return self.ln_final(x)


def encoder_unweighted_final_ln(self, src, pad_mask, need_weights=False):
    x = self.embed(src)
    for layer in self.layers:
        x, _ = layer(x, pad_mask, need_weights=need_weights)
    return F.layer_norm(x, x.shape[-1:])


def encoder_ln_at_start(self, src, pad_mask, need_weights=False):  # Post-Norm habit, misplaced
    x = self.ln_final(self.embed(src))
    for layer in self.layers:
        x, _ = layer(x, pad_mask, need_weights=need_weights)
    return x


def encoder_mask_inverted(self, src, pad_mask, need_weights=False):
    inverted = None if pad_mask is None else ~pad_mask
    return encoder_correct(self, src, inverted, need_weights)


def encoder_no_unpack(self, src, pad_mask, need_weights=False):  # x becomes a (x, weights) pair
    x = self.embed(src)
    for layer in self.layers:
        x = layer(x, pad_mask, need_weights=need_weights)
    return self.ln_final(x)
