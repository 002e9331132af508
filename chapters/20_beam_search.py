# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Transformer book (pinned numerics)
#     language: python
#     name: transformer-book
# ---

# %% [markdown]
# # 20. Beam search on the KV cache
#
# Greedy decoding (chapter 11) keeps one hypothesis and takes the most likely token at every
# step. The most likely *sequence* can start with a less likely token. **Beam search** keeps the
# $k$ best partial sequences instead. Exercise 11.3 wrote it for one source, re-running the
# decoder over every prefix. Here we build the real one: a batch of sources, $k$ beams each,
# on chapter 13's KV cache. Then we check it against greedy decoding and against exhaustive
# search. The picture shows the beams of one source on a deliberately under-trained model.
#
# ![The beams of one source, step by step](figures/20_beam_search.png)

# %% [markdown] tags=["run-time"]
# **Run time:** about 10 s. The first time, it also trains a model on a short budget (`fixed_budget_recipe(steps=150)`) and caches it on disk (about 15 s more); later runs load it.

# %%
import itertools
import math

import matplotlib.pyplot as plt
import torch

from helpers import (
    BOOK_RECIPE,
    BOS_ID,
    EOS_ID,
    PAD_ID,
    VOCAB_SIZE,
    Transformer,
    beam_search,
    describe,
    fixed_budget_recipe,
    greedy_decode,
    load_or_train,
    make_padding_mask,
    sequences_equal,
    wilson_interval,
)
from helpers.analysis.experiments import mcnemar_exact
from helpers.decoding.beam_search import gnmt_length_penalty
from helpers.exercises import check_reorder_caches
from helpers.training.evaluation import test_set

_ = torch.manual_seed(0)
torch.set_num_threads(1)  # small tensors: one CPU thread is enough

# %% [markdown]
# Beam search matters when the model is unsure. The book's trained model reverses almost every
# test sequence greedily (chapter 11), so we use a model that stopped early: the book's recipe
# for only 150 steps, with no early stop. We score it on the first 1,000 sequences of the test set.

# %%
UNDER_TRAINED = fixed_budget_recipe(BOOK_RECIPE, steps=150)
model = load_or_train(UNDER_TRAINED, progress=False, verbose=False).model.eval()
src_test, tgt_test = test_set(1000)
print({k: getattr(model.config, k) for k in ("d_model", "num_layers", "max_len")})
print("training steps:", UNDER_TRAINED.max_steps, "| test src", tuple(src_test.shape))
print("target vocabulary V =", model.tgt_vocab)

# %% [markdown]
# ## 1. A sequence's score is a sum of log-probabilities
#
# The decoder gives $P(y_t \mid y_{<t}, x)$ for every next token. A whole output $y$ has
#
# $$\log P(y \mid x) = \sum_t \log P(y_t \mid y_{<t}, x).$$
#
# We add logs instead of multiplying probabilities: the log of a product is the sum of the logs.
# A toy with two steps shows how greedy decoding misses the best sequence. Step 1 offers `a` or
# `b`, step 2 offers `x`, `y` or `z`. Token `a` is more likely at step 1. But after `a` the model
# is unsure, and after `b` it is not.

# %%
step1 = {"a": 0.6, "b": 0.4}
step2 = {"a": {"x": 0.34, "y": 0.33, "z": 0.33}, "b": {"x": 0.9, "y": 0.05, "z": 0.05}}
every = {
    (t1, t2): math.log(p1) + math.log(p2)
    for t1, p1 in step1.items()
    for t2, p2 in step2[t1].items()
}
greedy_toy = max(step1, key=step1.get)
greedy_toy = (greedy_toy, max(step2[greedy_toy], key=step2[greedy_toy].get))
best_toy = max(every, key=every.get)
for seq, lp in sorted(every.items(), key=lambda kv: -kv[1]):
    print(f"{''.join(seq)}: log P = {lp:7.4f}, P = {math.exp(lp):.3f}")
print("greedy picks", "".join(greedy_toy), "| the best sequence is", "".join(best_toy))
assert greedy_toy == ("a", "x") and best_toy == ("b", "x")

# %% [markdown]
# A beam of width 2 keeps both `a` and `b` after step 1. At step 2 it extends both and keeps
# the two best of the six sequences, so it finds `bx`.
#
# ## 2. The length penalty
#
# Every token adds a negative log-probability. So a sum favours short outputs: a hypothesis
# that stops early with `<eos>` pays for fewer tokens. GNMT {cite}`wu2016` divides by a length
# penalty,
#
# $$\text{score}(y) = \frac{\log P(y \mid x)}{lp(|y|)}, \qquad
#   lp(n) = \left(\frac{5 + n}{6}\right)^{\alpha}.$$
#
# $|y|$ counts the tokens after `<bos>`, the `<eos>` included. $\alpha = 0$ is the plain sum.
# The Transformer paper used $\alpha = 0.6$ {cite}`vaswani2017`. Two hypotheses, one short and
# one long:

# %%
lengths_toy = torch.tensor([3, 12])
log_p_toy = torch.tensor([-1.2, -1.5])
for alpha in (0.0, 0.6, 1.0):
    lp = gnmt_length_penalty(lengths_toy, alpha)
    score = log_p_toy / lp
    winner = int(score.argmax())
    print(
        f"alpha {alpha}: lp = {lp[0]:.3f}, {lp[1]:.3f} | scores {score[0]:.3f}, {score[1]:.3f}"
        f" | winner: {int(lengths_toy[winner])} tokens"
    )
    assert winner == (0 if alpha == 0 else 1)

# %% [markdown]
# With $\alpha = 0$ the short hypothesis wins on its sum. With $\alpha = 0.6$ the long one's
# larger penalty divides its log-probability more, and it wins.
#
# ## 3. Beams in a batch: $B \cdot k$ rows
#
# We search $B$ sources at once, $k$ beams each. The decoder sees $B \cdot k$ rows, beam $w$ of
# source $b$ in row $b \cdot k + w$. Each beam has a summed log-probability, a length and a flag
# "finished". One step:
#
# 1. the decoder gives log-probabilities `[B*k, V]`, viewed as `[B, k, V]`;
# 2. every beam's sum plus every next token gives $k \cdot V$ candidates per source;
# 3. we divide by the length penalty and keep the top $k$ of each source's `[k*V]` scores;
# 4. a kept candidate's index says its **parent** beam (`index // V`) and its **token**
#    (`index % V`).
#
# A finished beam has a single continuation: `<pad>`, at no cost. So it keeps its score and
# competes with the live beams' extensions for the $k$ places. At the start only beam 0 is real;
# the others have log-probability $-\infty$, so the first step does not pick $k$ copies of one
# token.

# %%
NEG_INF = float("-inf")


def select(log_probs, lengths, finished, logp, alpha):
    """One beam step. log_probs, lengths, finished: [B, k]; logp: [B, k, V] next-token
    log-probabilities. -> parent, token, and the new log_probs, lengths, finished, all [B, k]."""
    B, k, V = logp.shape
    stay = torch.full((V,), NEG_INF)
    stay[PAD_ID] = 0.0  # a finished beam: <pad> at no cost, nothing else
    logp = torch.where(finished[..., None], stay, logp)
    cand = log_probs[..., None] + logp  # [B, k, V]: the sum so far plus each next token
    cand_len = lengths + (~finished).long()
    rank = cand / gnmt_length_penalty(cand_len, alpha)[..., None]
    top_rank, top = rank.view(B, k * V).topk(k, dim=1)  # best first
    parent, token = top // V, top % V
    empty = top_rank == NEG_INF  # fewer real candidates than places
    was_finished = finished.gather(1, parent)
    log_probs = cand.view(B, k * V).gather(1, top).masked_fill(empty, NEG_INF)
    lengths = cand_len.gather(1, parent)
    token = token.masked_fill(was_finished | empty, PAD_ID)
    finished = was_finished | empty | (token == EOS_ID)
    return parent, token, log_probs, lengths, finished


# %% [markdown]
# One step by hand, on two sources and $k = 3$. Step 0 feeds `<bos>` to one row per source, so
# its log-probabilities are expanded to the three beams. Only beam 0 is real.

# %% tags=["nbval-ignore-output"]
B, k, V = 2, 3, model.tgt_vocab
src2 = src_test[:2]
with torch.no_grad():
    logits = model(src2, torch.full((B, 1), BOS_ID))[:, -1]  # [B, V]
logp = logits.log_softmax(-1).view(B, 1, V).expand(B, k, V)
log_probs = torch.tensor([[0.0, NEG_INF, NEG_INF]] * B)
lengths = torch.zeros(B, k, dtype=torch.long)
finished = torch.tensor([[False, True, True]] * B)
parent, token, log_probs, lengths, finished = select(log_probs, lengths, finished, logp, 0.6)
print("logits", tuple(logits.shape), "-> logp", tuple(logp.shape), "-> candidates", (B, k * V))
print("parent", parent.tolist(), "| token", token.tolist())
print("log_probs", [[round(x, 3) for x in row] for row in log_probs.tolist()])
assert parent.shape == token.shape == (B, k) and (parent == 0).all()
assert (log_probs[:, :-1] >= log_probs[:, 1:]).all()  # best first, at equal lengths
assert torch.equal(log_probs, logp[:, 0].gather(1, token))  # each beam's token, its log P
assert torch.equal(log_probs, logp[:, 0].topk(k).values)  # the three best first tokens

# %% [markdown]
# Every beam descends from beam 0, and the three tokens are the three most likely first tokens.
#
# ## 4. The cache follows the beams
#
# Chapter 13's cache keeps, per decoder layer, the self-attention keys and values of every row,
# `[rows, h, t, d_k]`. After a step, new beam $w$ of source $b$ descends from parent beam
# $p$. Its past is the parent's past. So the cache's rows are **reordered by parent**: row
# $b \cdot k + w$ takes row $b \cdot k + p$, one `index_select` on dim 0.
#
# The cross-attention keys and values depend only on the source. Step 0 projects them for the
# $B$ sources. One `index_select` repeats them to the $k$ beams of each source, and they never
# change after that: a beam's parent is always a beam of the same source.


# %%
def reorder(caches, rows, step):
    """Reorder every layer's cache in place: row i takes old row rows[i]."""
    for cache in caches:
        cache["self_k"] = cache["self_k"].index_select(0, rows)
        cache["self_v"] = cache["self_v"].index_select(0, rows)
        if step == 0:  # B rows -> B * k rows, once; shared by the beams from then on
            cache["cross_k"] = cache["cross_k"].index_select(0, rows)
            cache["cross_v"] = cache["cross_v"].index_select(0, rows)


@torch.no_grad()
def beam_search_by_hand(model, src, k, alpha=0.6, reorder_cache=True, history=None):
    """Beam search of width k for src [B, Ls]. -> (beams [B, k, L], scores [B, k]), best
    first. history: a list that receives (parent, token, log_probs) after every step."""
    B, V, max_len = src.size(0), model.tgt_vocab, model.max_len
    memory, src_mask = model.encode(src)  # once, B rows
    seqs = torch.full((B, k, 1), BOS_ID)
    log_probs = torch.full((B, k), NEG_INF)
    log_probs[:, 0] = 0.0  # one real beam per source to start with
    lengths = torch.zeros(B, k, dtype=torch.long)
    finished = torch.ones(B, k, dtype=torch.bool)
    finished[:, 0] = False
    first_row = (torch.arange(B) * k)[:, None]  # [B, 1]: row of beam 0 of each source
    caches = [{} for _ in model.decoder.layers]
    mem, mem_mask = memory, src_mask
    for step in range(max_len - 1):
        if finished.all():
            break
        rows = seqs[:, 0] if step == 0 else seqs.reshape(B * k, -1)  # [B or B*k, step + 1]
        h, _ = model.decoder(
            rows[:, -1:],  # only the newest token
            mem,
            make_padding_mask(rows),
            mem_mask,
            need_weights=False,
            caches=caches,
            start_pos=step,
        )
        logp = model.out_proj(h[:, -1]).log_softmax(-1).view(B, -1, V).expand(B, k, V)
        parent, token, log_probs, lengths, finished = select(
            log_probs, lengths, finished, logp, alpha
        )
        prefix = seqs.gather(1, parent[..., None].expand(-1, -1, seqs.size(2)))
        seqs = torch.cat([prefix, token[..., None]], dim=2)
        if history is not None:
            history.append((parent, token, log_probs))
        if step == 0:  # every beam of source b descends from row b, the one row fed
            parent_rows = torch.arange(B).repeat_interleave(k)  # [B*k]
            mem, mem_mask = (
                memory.index_select(0, parent_rows),
                src_mask.index_select(0, parent_rows),
            )
        else:
            parent_rows = (first_row + parent).view(-1)  # [B*k]: global row of each parent
        if reorder_cache or step == 0:
            reorder(caches, parent_rows, step)
    scores = log_probs / gnmt_length_penalty(lengths, alpha)
    order = scores.argsort(dim=1, descending=True, stable=True)
    seqs = seqs.gather(1, order[..., None].expand(-1, -1, seqs.size(2)))
    return seqs, scores.gather(1, order)


# %% [markdown]
# After step 0 the parent of beam $w$ of source $b$ sits in row `b * k + parent[b, w]`. Hooks
# count the rows that reach layer 0's cross-attention key projection and
# self-attention query projection, for 8 sources and $k = 4$.


# %%
def rows_through(modules, run):
    """Call run(); -> per module, the number of rows of each call."""
    seen = {name: [] for name in modules}
    hooks = [
        m.register_forward_hook(lambda mod, inp, out, name=name: seen[name].append(inp[0].shape[0]))
        for name, m in modules.items()
    ]
    try:
        run()
    finally:
        for h in hooks:
            h.remove()
    return seen


layer0 = model.decoder.layers[0]
seen = rows_through(
    {"cross keys": layer0.cross_mha.W_k, "self queries": layer0.self_mha.W_q},
    lambda: beam_search_by_hand(model, src_test[:8], 4),
)
print("cross-attention key projection, rows per call:", seen["cross keys"])
print("self-attention queries, rows per step:", seen["self queries"])
assert seen["cross keys"] == [8]  # once, for the 8 sources
assert seen["self queries"][0] == 8 and set(seen["self queries"][1:]) == {8 * 4}

# %% [markdown]
# ### The pitfall: a cache that does not follow the beams
#
# Forget the reordering after step 0, and row $b \cdot k + w$ keeps the past of *old* beam $w$.
# The search raises no error. It decodes with the wrong prefixes. We compare both versions with
# the library's `helpers.beam_search` on 200 sources, $k = 4$.

# %% tags=["nbval-ignore-output"]
src200 = src_test[:200]
lib = beam_search(model, src200, 4, length_penalty=0.6)
broken_beams, broken_scores = beam_search_by_hand(model, src200, 4, reorder_cache=False)
differ = broken_beams[..., : lib.beams.size(2)] != lib.beams[..., : broken_beams.size(2)]
n_differ = int(differ.flatten(1).any(1).sum())
print(f"without reordering: {n_differ} of 200 sources end with other beams than the library's")
assert n_differ > 0

# %% [markdown]
# Now with the reordering:

# %%
beams, scores = beam_search_by_hand(model, src200, 4)
print("beams", tuple(beams.shape), "scores", tuple(scores.shape))
assert torch.equal(beams, lib.beams) and torch.equal(scores, lib.beam_scores)
assert torch.equal(beams[:, 0, : lib.tokens.size(1)], lib.tokens)

# %% [markdown]
# Token for token and bit for bit the library's result: it runs the same operations.
#
# ## 5. Finished hypotheses
#
# The final beams of one source, best first. A finished beam ends with `<eos>` and is padded.


# %% tags=["nbval-ignore-output"]
def body(row):
    """The tokens after <bos> up to the first <eos>, included."""
    toks = row[1:].tolist()
    return toks[: toks.index(EOS_ID) + 1] if EOS_ID in toks else toks


for w in range(4):
    toks = body(beams[0, w])
    print(f"beam {w}: score {scores[0, w]:8.4f}, {len(toks):>2} tokens: {describe(beams[0, w])}")
print("target:                           ", describe(tgt_test[0]))
assert all(body(beams[0, w])[-1] == EOS_ID for w in range(4))

# %% [markdown]
# Every beam here ended with `<eos>` before `max_len`. The search stops when all beams of all
# sources are finished. A beam still live at `max_len` is complete without `<eos>`.
#
# ## 6. Two checks: greedy decoding and exhaustive search
#
# **Width 1 is greedy decoding.** One beam keeps the best token at every step. Two different
# computations of the argmax may disagree where two logits are almost equal. So we record the
# logits that both searches compute, with a forward hook on the output projection. We measure
# the smallest gap between the top two logits along greedy's path, and the largest difference
# between the two searches' logits. The tokens can only differ if the difference reaches half
# the gap.


# %% tags=["nbval-ignore-output"]
def with_logits(run):
    """Call run(); -> (its result, the output projection's logits [B, steps, V])."""
    seen = []
    hook = model.out_proj.register_forward_hook(lambda mod, inp, out: seen.append(out))
    try:
        result = run()
    finally:
        hook.remove()
    return result, torch.stack(seen, dim=1)


greedy200, greedy_logits = with_logits(lambda: greedy_decode(model, src200, use_cache=True))
one, one_logits = with_logits(lambda: beam_search(model, src200, 1))
top2 = greedy_logits.topk(2, dim=-1).values
written = (greedy200[:, :-1] != PAD_ID) & (greedy200[:, :-1] != EOS_ID)  # steps up to <eos>
margin = (top2[..., 0] - top2[..., 1])[written].min().item()
steps = min(greedy_logits.size(1), one_logits.size(1))
diff = (greedy_logits[:, :steps] - one_logits[:, :steps])[written[:, :steps]].abs().max().item()
print(f"smallest top-2 logit gap along greedy's path: {margin:.2e}")
print(f"largest logit difference between the two searches: {diff:.2e}")
print("width 1:", tuple(one.tokens.shape), "greedy:", tuple(greedy200.shape))
assert margin > 2 * diff + 1e-4  # the gap dwarfs the difference, with room for rounding
assert torch.equal(one.tokens, greedy200)

# %% [markdown]
# **Exhaustive search.** On a tiny vocabulary we can score every output. A random model with
# $V = 5$ target tokens (`<pad>`, `<bos>`, `<eos>` and two more) writes at most 4 tokens. That
# is $5^4 = 625$ token strings. A string's hypothesis is its prefix up to the first `<eos>`. One
# forward pass scores them all. A beam of width 625 never drops anything, so it must find the
# best hypothesis and its score. The random model may write any token, `<pad>` included, and
# the search allows it, as greedy decoding does.

# %% tags=["nbval-ignore-output"]
torch.manual_seed(0)
tiny = Transformer(VOCAB_SIZE, 5, d_model=16, num_heads=4, dff=32, num_layers=2, max_len=8)
tiny.eval()
STEPS = 4
tiny_src = src_test[:3, :6]


@torch.no_grad()
def exhaustive(model, src_row, alpha):
    """{hypothesis: score} for every output of at most STEPS tokens."""
    V = model.tgt_vocab
    strings = torch.tensor(list(itertools.product(range(V), repeat=STEPS)))  # [V**STEPS, STEPS]
    tgt_in = torch.cat([torch.full((len(strings), 1), BOS_ID), strings[:, :-1]], dim=1)
    logp = model(src_row[None].expand(len(strings), -1), tgt_in).log_softmax(-1)
    logp = logp.gather(2, strings[..., None])[..., 0]  # [N, STEPS]
    is_eos = strings == EOS_ID
    n = torch.where(is_eos.any(1), is_eos.long().argmax(1) + 1, STEPS)  # tokens up to <eos>
    log_p = (logp * (torch.arange(STEPS) < n[:, None])).sum(1)
    score = log_p / gnmt_length_penalty(n, alpha)
    return {tuple(s[:m]): sc for s, m, sc in zip(strings.tolist(), n.tolist(), score.tolist())}


for alpha in (0.0, 0.6):
    wide = beam_search(tiny, tiny_src, 5**STEPS, max_len=STEPS + 1, length_penalty=alpha)
    for b in range(tiny_src.size(0)):
        table = exhaustive(tiny, tiny_src[b], alpha)
        (best, best_score), (_, second) = sorted(table.items(), key=lambda kv: -kv[1])[:2]
        found = tuple(body(wide.tokens[b]))
        print(
            f"alpha {alpha}, source {b}: {len(table)} hypotheses; best [{describe(best)}] "
            f"score {best_score:.5f}; beam [{describe(found)}] score {wide.scores[b]:.5f}"
        )
        assert len(table) == sum(4 ** (n - 1) for n in range(1, STEPS + 1)) + 4**STEPS
        assert best_score - second > 1e-4  # a unique optimum
        assert found == best and abs(wide.scores[b].item() - best_score) < 1e-5

# %% [markdown]
# The 625 strings make 341 hypotheses: $4^{n-1}$ that end with `<eos>` as token $n$, for
# $n = 1, \dots, 4$, and $4^4$ cut at 4 tokens. The search and the table agree on the best one
# and its score, for both $\alpha$.
#
# ## 7. Does a wider beam help?
#
# Exact match on the 1,000 test sequences, greedy against widths 2, 4 and 8, with Wilson
# intervals. The arms share the test set, so McNemar's test compares them sequence by
# sequence: it counts the sequences that only one of the two got right.

# %% tags=["nbval-ignore-output"]
greedy_ok = sequences_equal(greedy_decode(model, src_test, use_cache=True), tgt_test)
right = {1: greedy_ok}
for width in (2, 4, 8):
    right[width] = sequences_equal(beam_search(model, src_test, width).tokens, tgt_test)
for width, ok in right.items():
    low, high = wilson_interval(int(ok.sum()), len(ok))
    line = f"width {width}: exact match {ok.float().mean():.3f} (95 % {low:.3f} to {high:.3f})"
    if width > 1:
        line += f" | vs greedy: {mcnemar_exact(ok.numpy(), greedy_ok.numpy())}"
    print(line)

# %% [markdown]
# McNemar's line counts the sequences only the beam got right (A) and only greedy decoding got
# right (B). One model on 1,000 sequences is one training run and a small sample. The
# Experiments page
# [Beam width on an under-trained model](../appendix/experiment_beam_width.ipynb) repeats this on
# five seeds and 2,000 sequences.
#
# Figure 20.1 draws a width-4 search with $\alpha = 0$, so the beams are ranked by their summed
# log-probability alone. It picks the source on which that search gains the most
# log-probability over greedy decoding. Each dot is a kept beam after a step, at its summed
# log-probability. Lines join a beam to its parent.


# %% jupyter={"source_hidden": true} tags=["figure", "hide-input", "opening-figure"]
def log_p_of(model, src, out):
    """Summed log-probability of each row of out (<bos> first) up to its <eos>."""
    with torch.no_grad():
        lp = model(src, out[:, :-1]).log_softmax(-1).gather(2, out[:, 1:, None])[..., 0]
    keep = torch.ones_like(lp, dtype=torch.bool)
    for i, row in enumerate(out[:, 1:].tolist()):
        if EOS_ID in row:
            keep[i, row.index(EOS_ID) + 1 :] = False
    return (lp * keep).sum(1)


wide4 = beam_search(model, src200, 4, length_penalty=0.0)
gain = log_p_of(model, src200, wide4.tokens) - log_p_of(model, src200, greedy200)
pick = int(gain.argmax())
hist = []
beam_search_by_hand(model, src200[pick : pick + 1], 4, alpha=0.0, history=hist)
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw=dict(width_ratios=[3, 2]))
prev = [0.0, None, None, None]
for t, (parent, token, lps) in enumerate(hist, start=1):
    for w in range(4):
        y = lps[0, w].item()
        if y == NEG_INF:
            continue
        p = int(parent[0, w])
        if prev[p] is not None:
            ax1.plot([t - 1, t], [prev[p], y], "-", color="0.6", lw=1)
        ax1.plot(t, y, "o", color="tab:blue" if w == 0 else "tab:orange", ms=5)
        if int(token[0, w]) == PAD_ID:
            continue  # a finished beam staying in place
        ax1.annotate(
            describe(token[0, w : w + 1]),
            (t, y),
            fontsize=7,
            xytext=(3, 2),
            textcoords="offset points",
        )
    prev = [lps[0, w].item() if lps[0, w] > NEG_INF else None for w in range(4)]
g_lp = log_p_of(model, src200[pick : pick + 1], greedy200[pick : pick + 1]).item()
ax1.axhline(g_lp, ls="--", color="tab:red", lw=1, label=f"greedy's whole sequence: {g_lp:.2f}")
ax1.set_xlabel("step")
ax1.set_ylabel("summed log-probability")
shown = src200[pick][src200[pick] != PAD_ID]
ax1.set_title(f"Width 4, source {describe(shown)} (blue: best beam)", fontsize=9)
ax1.legend(fontsize=8)
widths = list(right)
ems = [right[w].float().mean().item() for w in widths]
cis = [wilson_interval(int(right[w].sum()), len(right[w])) for w in widths]
ax2.errorbar(
    range(len(widths)),
    ems,
    yerr=[[e - c[0] for e, c in zip(ems, cis)], [c[1] - e for e, c in zip(ems, cis)]],
    fmt="o",
    capsize=4,
)
ax2.set_xticks(range(len(widths)), ["greedy"] + [f"width {w}" for w in widths[1:]])
ax2.set_ylabel("test exact match (1,000 sequences)")
ax2.set_title("Exact match with 95 % Wilson intervals", fontsize=9)
fig.suptitle("Figure 20.1: beam search on the under-trained model", fontsize=11)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## The finished piece
#
# `helpers.beam_search(model, src, beam_width, max_len=None, length_penalty=0.6,
# use_cache=True)` is the search of sections 3 and 4. It returns the best sequence of each
# source (`tokens`, laid out as `greedy_decode`'s output), its score and log-probability, and
# every final beam (`beams`, `beam_scores`).
#
# :::{dropdown} Going deeper: what a beam costs
# A step of width $k$ runs the decoder on $B \cdot k$ rows instead of $B$ (the hook counts of
# section 4), and the self-attention cache holds $k$ times as many rows. The encoder still runs
# once, on the $B$ sources. What that costs in seconds depends on the machine. The
# [beam width page](../appendix/experiment_beam_width.ipynb) times each width against greedy
# decoding on one machine.
# :::
#
# ## Summary
#
# - A sequence's score is the sum of its tokens' log-probabilities. Greedy decoding can miss the
#   best sequence when a less likely first token leads to a much more likely rest.
# - GNMT's length penalty divides the sum by $((5 + n)/6)^{\alpha}$. Without it ($\alpha = 0$)
#   the sum favours short hypotheses.
# - A batch of $B$ sources with $k$ beams each is $B \cdot k$ decoder rows. One `topk` over each
#   source's $k \cdot V$ candidates gives the parent beams and the new tokens.
# - The self-attention cache is reordered by parent with `index_select` after every step. The
#   cross-attention keys and values are projected once and repeated to the beams once.
#   Forgetting the reordering raises no error and decodes other beams.
# - A finished beam keeps its score and competes with the live ones.
# - Width 1 is greedy decoding, token for token. A beam wider than the number of hypotheses is
#   exhaustive search.
#
# ## Exercises
#
# ### Exercise 20.1 (predict, then run): which hypothesis wins
#
# A finished hypothesis of 4 tokens has $\log P = -2.0$. A live beam has 9 tokens so far and
# $\log P = -2.3$; its next token has probability 0.8 and is `<eos>`. With $\alpha = 0$ and with
# $\alpha = 0.6$, which of the two finished hypotheses scores higher? Predict, then compute.

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 20.1
lens = torch.tensor([4, 10])  # the <eos> is the live beam's tenth token
sums = torch.tensor([-2.0, -2.3 + math.log(0.8)])
for alpha in (0.0, 0.6):
    s = sums / gnmt_length_penalty(lens, alpha)
    print(f"alpha {alpha}: scores {s[0]:.4f} (4 tokens), {s[1]:.4f} (10 tokens)")
assert (sums / gnmt_length_penalty(lens, 0.0)).argmax() == 0
assert (sums / gnmt_length_penalty(lens, 0.6)).argmax() == 1

# %% [markdown]
# ### Exercise 20.2 (predict, then run): one beam and the length penalty
#
# Section 6 ran width 1 with $\alpha = 0.6$ and got greedy decoding. Would $\alpha = 0$ or
# $\alpha = 2$ change the tokens of a width-1 search? Predict, then run it on the 200 sources of
# section 4.

# %% jupyter={"outputs_hidden": true, "source_hidden": true} tags=["hide-cell"]
# Solution to exercise 20.2
# One beam: all its candidates at a step have the same length, so they share one penalty, and
# dividing by it keeps their order. The only other candidate is <pad> after <eos>, alone.
for alpha in (0.0, 2.0):
    tokens = beam_search(model, src200, 1, length_penalty=alpha).tokens
    assert tokens.shape == greedy200.shape
    n_rows = int((tokens != greedy200).any(1).sum())
    print(f"alpha {alpha}: {n_rows} of 200 rows differ from greedy decoding")
    assert n_rows == 0


# %% [markdown]
# ### Exercise 20.3 (implement): reorder the cache by parent
#
# Write `reorder_caches(caches, parent)`. `caches` holds one dict per decoder layer, with
# `self_k`, `self_v`, `cross_k`, `cross_v` of `B * k` rows each. `parent` `[B, k]` holds, for
# every new beam, the index of its parent among its own source's $k$ beams. Reorder every
# layer's self-attention keys and values, so that row $b \cdot k + w$ holds the past of row
# $b \cdot k + $ `parent[b, w]`. Write the new tensors into each layer's dict
# (`cache["self_k"] = ...`) and return nothing. Leave `cross_k` and `cross_v` as they are.
# `check_reorder_caches(reorder_caches)` tries your function on made-up caches, then runs a beam
# search with it and compares the result with the library's.


# %% jupyter={"source_hidden": true} tags=["hide-input"]
# Solution to exercise 20.3
def reorder_caches(caches, parent):
    B, k = parent.shape
    rows = (torch.arange(B)[:, None] * k + parent).view(-1)  # global rows of the parents
    for cache in caches:
        cache["self_k"] = cache["self_k"].index_select(0, rows)
        cache["self_v"] = cache["self_v"].index_select(0, rows)


check_reorder_caches(reorder_caches)
