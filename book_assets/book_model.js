/* The book's encoder-decoder Transformer in plain JavaScript: the forward pass of
 * src/helpers (model.py, layers.py, attention.py, embeddings.py) and greedy decoding with a KV
 * cache (decoding.py), on weights exported by tools/build/export_live_models.py.
 *
 * window.BookModel:
 *   load(id, baseUrl) -> Promise of the model: injects <script src="baseUrl + weights_<id>.js">
 *       (a script, not fetch(): it loads from file:// too) and builds the model once.
 *   get(id) -> the loaded model or null.
 *   parseDigits(text) -> {digits: [...]} or {error: "..."}: 1 to 12 digits, spaces and
 *       commas between them allowed (as helpers.parse_digits).
 *   decode(id or model, digits, {trace}) -> {tokens, logits, steps}: greedy decoding as
 *       helpers.greedy_decode (stops after <eos> or at max_len tokens); logits[t] are the
 *       logits of step t; with trace, steps[t] holds the probabilities, the cross-attention
 *       weights [layer][head][source position] and the KV cache's sizes.
 *   erf(x), tokenName(id).
 *
 * Weights are float32 (exact, from the file); the arithmetic is float64. PyTorch computes in
 * float32, so logits differ from its by up to about 2e-5 (tools/check/browser/ prints the
 * largest gap, requires at most 1e-4 and equal tokens on 2,111 inputs per model). Only the
 * sources the page feeds exist here: no padding, so the source padding mask is never set;
 * the cache holds past positions only, so self-attention is causal by construction.
 */
(function () {
  "use strict";

  var WEIGHTS_GLOBAL = "BOOK_MODEL_WEIGHTS";
  var MAX_DIGITS = 12;

  /* erf(x) to about 1e-16: for |x| < 3 the series 2/sqrt(pi) exp(-x^2) sum 2^n x^(2n+1) /
   * (1*3*...*(2n+1)) (Abramowitz and Stegun 7.1.6: every term positive, no cancellation);
   * for 3 <= |x| < 6, erfc from its continued fraction (A&S 7.1.14), evaluated from the tail;
   * beyond, erf is 1 to double precision. */
  function erf(x) {
    var ax = Math.abs(x), s = x < 0 ? -1 : 1;
    if (ax < 3) {
      var term = ax, sum = ax, n = 0;
      while (term > sum * 1e-17) {
        n += 1;
        term *= 2 * ax * ax / (2 * n + 1);
        sum += term;
      }
      return s * 2 / Math.sqrt(Math.PI) * Math.exp(-ax * ax) * sum;
    }
    if (ax >= 6) return s;
    // erfc(x) = exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + 2/(x + ...)))))
    var t = ax;
    for (var k = 80; k >= 1; k--) t = ax + (k / 2) / t;
    return s * (1 - Math.exp(-ax * ax) / Math.sqrt(Math.PI) / t);
  }

  function gelu(x) { return 0.5 * x * (1 + erf(x / Math.SQRT2)); }

  function tokenName(id) {
    if (id === 0) return "<pad>";
    if (id === 1) return "<bos>";
    if (id === 2) return "<eos>";
    return String(id - 3);
  }

  /* base64 of little-endian float32 -> Float32Array (DataView: independent of the machine) */
  function floats(b64, count) {
    var bin = atob(b64);
    if (bin.length !== 4 * count) throw new Error("weights: " + bin.length + " bytes for " + count + " floats");
    var bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    var view = new DataView(bytes.buffer), out = new Float32Array(count);
    for (var j = 0; j < count; j++) out[j] = view.getFloat32(4 * j, true);
    return out;
  }

  function Model(data) {
    var c = data.config;
    // what the forward pass below computes; another export must not run silently
    if (c.norm !== "pre" || c.activation !== "gelu_erf" || c.positions !== "sinusoidal") {
      throw new Error(data.id + ": this page computes Pre-Norm, exact GELU, sinusoidal positions");
    }
    this.id = data.id;
    this.label = data.label;
    this.config = c;
    this.d = c.d_model;
    this.h = c.num_heads;
    this.dk = c.d_model / c.num_heads;
    this.dff = c.dff;
    this.L = c.num_layers;
    this.maxLen = c.max_len;
    this.eps = c.layer_norm_eps;
    this.ids = c.ids;
    this.parameters = data.parameters;
    var w = {};
    data.tensors.forEach(function (t) {
      var n = t.shape.reduce(function (a, b) { return a * b; }, 1);
      w[t.name] = {shape: t.shape, data: floats(t.data, n)};
    });
    this.w = w;
    this.pe = positions(c.max_len, c.d_model);
  }

  /* helpers.sinusoidal_position_encoding, each step rounded to float32 as torch's are (exp
   * and sin may still differ from torch's float32 kernels in the last bits) */
  function positions(maxLen, d) {
    var f = Math.fround, pe = [];
    var scale = f(-Math.log(10000) / d);
    var inv = [];
    for (var i = 0; i < d; i += 2) inv.push(f(Math.exp(f(f(i) * scale))));
    for (var p = 0; p < maxLen; p++) {
      var row = new Float64Array(d);
      for (var k = 0; k < d / 2; k++) {
        var a = f(p * inv[k]);
        row[2 * k] = f(Math.sin(a));
        row[2 * k + 1] = f(Math.cos(a));
      }
      pe.push(row);
    }
    return pe;
  }

  Model.prototype.tensor = function (name) {
    var t = this.w[name];
    if (!t) throw new Error(this.id + ": no tensor " + name);
    return t;
  };

  /* nn.Linear: y = W x + b, W [out, in] */
  Model.prototype.linear = function (prefix, x) {
    var W = this.tensor(prefix + ".weight"), b = this.tensor(prefix + ".bias").data;
    var out = W.shape[0], inn = W.shape[1], Wd = W.data, y = new Float64Array(out);
    for (var o = 0; o < out; o++) {
      var s = b[o], base = o * inn;
      for (var i = 0; i < inn; i++) s += Wd[base + i] * x[i];
      y[o] = s;
    }
    return y;
  };

  /* nn.LayerNorm: biased variance, eps inside the square root */
  Model.prototype.layerNorm = function (prefix, x) {
    var g = this.tensor(prefix + ".weight").data, b = this.tensor(prefix + ".bias").data;
    var n = x.length, mean = 0, v = 0, i;
    for (i = 0; i < n; i++) mean += x[i];
    mean /= n;
    for (i = 0; i < n; i++) v += (x[i] - mean) * (x[i] - mean);
    v /= n;
    var r = 1 / Math.sqrt(v + this.eps), y = new Float64Array(n);
    for (i = 0; i < n; i++) y[i] = (x[i] - mean) * r * g[i] + b[i];
    return y;
  };

  Model.prototype.ffn = function (prefix, x) {
    var hid = this.linear(prefix + ".net.0", x);
    for (var i = 0; i < hid.length; i++) hid[i] = gelu(hid[i]);
    return this.linear(prefix + ".net.2", hid);
  };

  Model.prototype.embed = function (which, id, pos) {
    var E = this.tensor(which + ".embed.emb.weight").data, d = this.d, x = new Float64Array(d);
    var ts = this.config.token_scale, ps = this.config.position_scale, pe = this.pe[pos];
    for (var i = 0; i < d; i++) x[i] = E[id * d + i] * ts + pe[i] * ps;
    return x;
  };

  /* one query vector q [d] against keys/values (arrays of [d] vectors, already projected);
   * blocked[j] true: key j is masked out. -> {out [d], weights [h][Lk]} */
  Model.prototype.attend = function (q, K, V, blocked) {
    var h = this.h, dk = this.dk, d = this.d, Lk = K.length, out = new Float64Array(d);
    var weights = [], scale = Math.sqrt(dk);
    for (var head = 0; head < h; head++) {
      var off = head * dk, s = new Float64Array(Lk), max = -Infinity, j, i;
      for (j = 0; j < Lk; j++) {
        if (blocked && blocked[j]) { s[j] = -Infinity; continue; }
        var dot = 0;
        for (i = 0; i < dk; i++) dot += q[off + i] * K[j][off + i];
        s[j] = dot / scale;
        if (s[j] > max) max = s[j];
      }
      var total = 0;
      for (j = 0; j < Lk; j++) { s[j] = s[j] === -Infinity ? 0 : Math.exp(s[j] - max); total += s[j]; }
      for (j = 0; j < Lk; j++) s[j] /= total;
      for (j = 0; j < Lk; j++) {
        if (s[j] === 0) continue;
        for (i = 0; i < dk; i++) out[off + i] += s[j] * V[j][off + i];
      }
      weights.push(Array.prototype.slice.call(s));
    }
    return {out: out, weights: weights};
  };

  function add(x, y) { for (var i = 0; i < x.length; i++) x[i] += y[i]; return x; }

  /* the encoder: src ids -> memory, one [d] vector per source position */
  Model.prototype.encode = function (src) {
    var self = this, pad = this.ids.pad;
    var xs = src.map(function (id, p) { return self.embed("encoder", id, p); });
    var blocked = src.map(function (id) { return id === pad; });
    for (var l = 0; l < this.L; l++) {
      var pre = "encoder.layers." + l;
      var hs = xs.map(function (x) { return self.layerNorm(pre + ".ln1", x); });
      var K = hs.map(function (x) { return self.linear(pre + ".mha.W_k", x); });
      var V = hs.map(function (x) { return self.linear(pre + ".mha.W_v", x); });
      xs = xs.map(function (x, p) {
        var a = self.attend(self.linear(pre + ".mha.W_q", hs[p]), K, V, blocked);
        add(x, self.linear(pre + ".mha.W_o", a.out));
        return add(x, self.ffn(pre + ".ffn", self.layerNorm(pre + ".ln2", x)));
      });
    }
    return xs.map(function (x) { return self.layerNorm("encoder.ln_final", x); });
  };

  /* a KV cache: per decoder layer, self-attention keys/values (growing) and cross-attention
   * keys/values (projected from the memory on the first step) */
  Model.prototype.newCache = function () {
    var layers = [];
    for (var l = 0; l < this.L; l++) layers.push({selfK: [], selfV: [], crossK: null, crossV: null});
    return {layers: layers, tokens: []};
  };

  /* one decoding step: the token at position pos -> {logits, cross [layer][head][Ls]} */
  Model.prototype.step = function (cache, memory, srcBlocked, id, pos) {
    var self = this, pad = this.ids.pad, x = this.embed("decoder", id, pos), cross = [];
    cache.tokens.push(id);
    var blocked = cache.tokens.map(function (t) { return t === pad; });
    for (var l = 0; l < this.L; l++) {
      var pre = "decoder.layers." + l, c = cache.layers[l];
      var h = this.layerNorm(pre + ".ln1", x);
      c.selfK.push(this.linear(pre + ".self_mha.W_k", h));
      c.selfV.push(this.linear(pre + ".self_mha.W_v", h));
      var a = this.attend(this.linear(pre + ".self_mha.W_q", h), c.selfK, c.selfV, blocked);
      add(x, this.linear(pre + ".self_mha.W_o", a.out));
      h = this.layerNorm(pre + ".ln2", x);
      if (c.crossK === null) {
        c.crossK = memory.map(function (m) { return self.linear(pre + ".cross_mha.W_k", m); });
        c.crossV = memory.map(function (m) { return self.linear(pre + ".cross_mha.W_v", m); });
      }
      a = this.attend(this.linear(pre + ".cross_mha.W_q", h), c.crossK, c.crossV, srcBlocked);
      add(x, this.linear(pre + ".cross_mha.W_o", a.out));
      add(x, this.ffn(pre + ".ffn", this.layerNorm(pre + ".ln3", x)));
      cross.push(a.weights);
    }
    var logits = this.linear("out_proj", this.layerNorm("decoder.ln_final", x));
    return {logits: Array.prototype.slice.call(logits), cross: cross};
  };

  function softmax(v) {
    var max = Math.max.apply(null, v), e = v.map(function (x) { return Math.exp(x - max); });
    var s = e.reduce(function (a, b) { return a + b; }, 0);
    return e.map(function (x) { return x / s; });
  }

  function argmax(v) {  // the first of equal maxima, as torch.argmax
    var best = 0;
    for (var i = 1; i < v.length; i++) if (v[i] > v[best]) best = i;
    return best;
  }

  /* greedy decoding, as helpers.greedy_decode(model, encode_digits(digits)) */
  Model.prototype.decode = function (digits, opts) {
    var ids = this.ids, trace = !!(opts && opts.trace);
    var src = digits.map(function (d) { return d + ids.digit_offset; }).concat([ids.eos]);
    if (src.length > this.maxLen) throw new Error("at most " + (this.maxLen - 1) + " digits");
    var memory = this.encode(src);
    var srcBlocked = src.map(function (id) { return id === ids.pad; });
    var cache = this.newCache(), tokens = [ids.bos], logits = [], steps = [];
    for (var t = 0; t < this.maxLen - 1; t++) {
      var r = this.step(cache, memory, srcBlocked, tokens[t], t);
      var next = argmax(r.logits);
      logits.push(r.logits);
      if (trace) {
        steps.push({input: tokens[t], next: next, probs: softmax(r.logits), cross: r.cross,
                    selfKeys: cache.layers.map(function (c) { return c.selfK.length; }),
                    crossKeys: cache.layers.map(function (c) { return c.crossK.length; })});
      }
      tokens.push(next);
      if (next === ids.eos) break;
    }
    return {src: src, tokens: tokens, logits: logits, steps: steps};
  };

  /* as helpers.parse_digits (the notebook explorer's box): '7 3 0 9', '7309' or '7,3,0,9' */
  function parseDigits(text) {
    var joined = String(text).replace(/,/g, " ").split(/\s+/).join("");
    if (joined === "") return {error: "Type at least one digit (0-9)."};
    var bad = joined.split("").filter(function (c, i, all) {
      return "0123456789".indexOf(c) < 0 && all.indexOf(c) === i;
    });
    if (bad.length) {
      return {error: "Only the digits 0-9 are allowed; found " +
              bad.map(function (c) { return "'" + c + "'"; }).join(" ") + "."};
    }
    if (joined.length > MAX_DIGITS) {
      return {error: joined.length + " digits is too long: these models reverse at most " +
              MAX_DIGITS + " (their max_len leaves room for <bos> and <eos>)."};
    }
    return {digits: joined.split("").map(Number)};
  }

  var models = {}, pending = {};

  function build(id) {
    var all = window[WEIGHTS_GLOBAL];
    if (!all || !all[id]) return null;
    if (!models[id]) models[id] = new Model(all[id]);
    return models[id];
  }

  function load(id, baseUrl) {
    var ready = build(id);
    if (ready) return Promise.resolve(ready);
    if (pending[id]) return pending[id];
    pending[id] = new Promise(function (resolve, reject) {
      var s = document.createElement("script");
      s.src = (baseUrl || "") + "weights_" + id + ".js";
      s.onload = function () {
        var m = build(id);
        if (m) resolve(m); else reject(new Error(s.src + " did not define model " + id));
      };
      s.onerror = function () { delete pending[id]; reject(new Error("could not load " + s.src)); };
      document.head.appendChild(s);
    });
    return pending[id];
  }

  function decode(model, digits, opts) {
    var m = typeof model === "string" ? build(model) : model;
    if (!m) throw new Error("model " + model + " is not loaded");
    return m.decode(digits, opts);
  }

  window.BookModel = {
    load: load, get: build, decode: decode, parseDigits: parseDigits, erf: erf,
    gelu: gelu, softmax: softmax, tokenName: tokenName, MAX_DIGITS: MAX_DIGITS
  };
})();
