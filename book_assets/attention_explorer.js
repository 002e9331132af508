/* Chapter 21's live explorer in the HTML book: the book's trained encoder-decoder runs in the
 * page (book_assets/book_model.js), on the digits the reader types. No kernel, no framework,
 * nothing from a CDN, no fetch(): every file is a <script> from the same folder, so the page
 * works from file:// as over HTTP.
 *
 * Every <div class="html-attention-explorer"> on the page gets an explorer. This script loads,
 * from its own folder: book_model.js (the model), live_models.js (the list of models, written
 * by tools/build/export_live_models.py) and, when a model is first chosen, its weights_<id>.js.
 *
 * The reader sees greedy decoding one step at a time (back, step, play), the next-token
 * probabilities of the step, the cross-attention of every decoder layer and head for the
 * step (the mirrored source position outlined; hover or focus a cell for its value; the mean
 * over heads), the map of the steps so far for one layer and head, and the KV cache growing.
 * Heatmaps are SVG coloured with matplotlib's "Blues" from 0 to 1, as the book's figures.
 */
(function () {
  "use strict";

  var here = document.currentScript && document.currentScript.src;
  var BASE = here ? here.slice(0, here.lastIndexOf("/") + 1) : "../_static/";
  var SVG_NS = "http://www.w3.org/2000/svg";
  var BLUES = ["#f7fbff", "#deebf7", "#c6dbef", "#9ecae1", "#6baed6",
               "#4292c6", "#2171b5", "#08519c", "#08306b"];
  var CELL = 30, PLAY_MS = 700;

  var CSS = [
    ".html-attention-explorer{position:relative;margin:1em 0;font-size:0.9rem}",
    ".bme-controls{display:flex;flex-wrap:wrap;gap:0.5em 1.2em;margin:0.5em 0;align-items:flex-end}",
    ".bme-controls label{display:flex;flex-direction:column;font-weight:600}",
    ".bme-controls input,.bme-controls select{font-weight:normal;min-width:8em;font-size:1rem}",
    ".bme-stepper{display:flex;flex-wrap:wrap;gap:0.4em;align-items:center;margin:0.5em 0}",
    ".bme-stepper button,.bme-tour button{padding:0.15em 0.7em;border:1px solid #888;",
    "border-radius:3px;background:#f4f4f4;cursor:pointer;font-size:0.9rem}",
    ".bme-stepper button:focus-visible,.bme-tour button:focus-visible{outline:3px solid #d62728}",
    ".bme-message{color:#a40000;font-weight:600;min-height:1.2em;margin:0.3em 0}",
    ".bme-output{font-family:monospace;font-size:1.05rem;margin:0.4em 0}",
    ".bme-output span{display:inline-block;padding:0 0.25em;margin:0 0.1em;border:1px solid #ccc}",
    ".bme-output span.bme-now{background:#fdd0a2;border-color:#e6550d}",
    ".bme-output span.bme-wrong{text-decoration:underline wavy #a40000}",
    ".bme-panels{display:flex;flex-wrap:wrap;gap:1em 2em}",
    ".bme-panels section{min-width:16em}",
    ".bme-panels h4{font-size:0.95rem;margin:0.6em 0 0.3em}",
    ".bme-bars{display:grid;grid-template-columns:4em 10em 4em;gap:1px 0.4em;align-items:center}",
    ".bme-bar{height:0.8em;background:#4292c6}",
    ".bme-bars .bme-chosen{font-weight:700}",
    ".bme-bars .bme-chosen .bme-bar{background:#e6550d}",
    ".bme-svg rect.bme-cell:focus{outline:none;stroke:#d62728;stroke-width:3}",
    ".bme-svg text{font-family:sans-serif;font-size:11px}",
    ".bme-kv{font-family:monospace}",
    ".bme-kv span{display:inline-block;min-width:1.6em;text-align:center;border:1px solid #999;",
    "margin:1px;background:#deebf7}",
    ".bme-kv span.bme-new{background:#fdd0a2}",
    ".bme-tip{position:absolute;pointer-events:none;background:#fff;border:1px solid #666;",
    "padding:0.2em 0.5em;border-radius:3px;box-shadow:0 1px 3px rgba(0,0,0,.3);",
    "white-space:nowrap;display:none;z-index:10}"
  ].join("");

  var STOPS = BLUES.map(function (h) {
    return [1, 3, 5].map(function (i) { return parseInt(h.substr(i, 2), 16); });
  });

  function blues(v) {  // weight in [0, 1] -> "rgb(r,g,b)", linear between the stops
    var x = Math.min(1, Math.max(0, v)) * (STOPS.length - 1);
    var i = Math.min(STOPS.length - 2, Math.floor(x)), t = x - i, a = STOPS[i], b = STOPS[i + 1];
    return "rgb(" + a.map(function (ai, k) { return Math.round(ai + (b[k] - ai) * t); }).join(",") + ")";
  }

  function el(tag, attrs, parent, text) {
    var node = tag.indexOf("svg:") === 0
      ? document.createElementNS(SVG_NS, tag.slice(4)) : document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }

  function loadScript(name, global) {
    if (window[global]) return Promise.resolve(window[global]);
    return new Promise(function (resolve, reject) {
      var s = el("script", {src: BASE + name});
      s.onload = function () {
        if (window[global]) resolve(window[global]);
        else reject(new Error(s.src + " did not define " + global));
      };
      s.onerror = function () { reject(new Error("could not load " + s.src)); };
      document.head.appendChild(s);
    });
  }

  var counter = 0;
  function uid(name) { counter += 1; return "bme-" + counter + "-" + name; }

  function labelled(parent, tag, text, attrs) {
    var id = uid(attrs["data-control"]);
    var label = el("label", {"for": id}, parent, text);
    attrs.id = id;
    return el(tag, attrs, label);
  }

  function mirrorOf(n, row) { return row < n ? n - 1 - row : (row === n ? n : -1); }

  /* An SVG heatmap: rows x cols weights, keyboard focusable cells (arrow keys move), a
   * tooltip on hover and focus; mirror[i]: the column to outline in row i (-1: none). */
  function heatmap(ex, parent, rows, cols, w, mirror, caption) {
    var left = 12 + 7 * Math.max.apply(null, rows.map(function (r) { return r.length; }));
    var top = 22, width = left + cols.length * CELL + 8, height = top + rows.length * CELL + 4;
    var svg = el("svg:svg", {
      "class": "bme-svg", width: width, height: height, viewBox: "0 0 " + width + " " + height,
      role: "group", "aria-label": caption + "; arrow keys move between cells"
    }, parent);
    cols.forEach(function (c, j) {
      el("svg:text", {x: left + j * CELL + CELL / 2, y: top - 7, "text-anchor": "middle"}, svg, c);
    });
    rows.forEach(function (r, i) {
      el("svg:text", {x: left - 5, y: top + i * CELL + CELL / 2 + 4, "text-anchor": "end"}, svg, r);
    });
    var cells = [];
    w.forEach(function (row, i) {
      row.forEach(function (v, j) {
        var text = rows[i] + ", source " + cols[j] + " (position " + j + "): weight " +
          v.toFixed(3) + (mirror[i] === j ? ", the mirrored position" : "");
        var rect = el("svg:rect", {
          "class": "bme-cell", role: "img", x: left + j * CELL, y: top + i * CELL, width: CELL, height: CELL,
          fill: blues(v), tabindex: i === 0 && j === 0 ? "0" : "-1", "data-row": i,
          "data-col": j, "data-weight": v.toFixed(6), "aria-label": text
        }, svg);
        cells.push(rect);
        if (v >= 0.095) {
          el("svg:text", {x: left + j * CELL + CELL / 2, y: top + i * CELL + CELL / 2 + 4,
                          "text-anchor": "middle", "font-size": "9", "pointer-events": "none",
                          fill: v > 0.6 ? "white" : "black"}, svg, v.toFixed(1));
        }
        var show = function () { ex.showTip(rect, text); };
        rect.addEventListener("mouseenter", show);
        rect.addEventListener("focus", show);
        rect.addEventListener("mouseleave", function () { ex.hideTip(); });
        rect.addEventListener("blur", function () { ex.hideTip(); });
        rect.addEventListener("keydown", function (ev) {
          var ni = i, nj = j;
          if (ev.key === "ArrowUp") ni = Math.max(0, i - 1);
          else if (ev.key === "ArrowDown") ni = Math.min(rows.length - 1, i + 1);
          else if (ev.key === "ArrowLeft") nj = Math.max(0, j - 1);
          else if (ev.key === "ArrowRight") nj = Math.min(cols.length - 1, j + 1);
          else if (ev.key === "Home") nj = 0;
          else if (ev.key === "End") nj = cols.length - 1;
          else return;
          ev.preventDefault();
          cells.forEach(function (c) { c.setAttribute("tabindex", "-1"); });
          var next = cells[ni * cols.length + nj];
          next.setAttribute("tabindex", "0");
          next.focus();
        });
      });
    });
    mirror.forEach(function (j, i) {
      if (j < 0 || j >= cols.length) return;
      el("svg:rect", {"class": "bme-mirror", x: left + j * CELL + 1.5, y: top + i * CELL + 1.5,
                      width: CELL - 3, height: CELL - 3, fill: "none", stroke: "#ff7f0e",
                      "stroke-width": 2, "pointer-events": "none"}, svg);
    });
    return svg;
  }

  function meanOfHeads(heads) {
    return heads[0].map(function (_, j) {
      return heads.reduce(function (s, h) { return s + h[j]; }, 0) / heads.length;
    });
  }

  function Explorer(root, index) {
    var self = this;
    this.root = root;
    this.index = index;
    this.t = 0;
    this.timer = null;
    root.textContent = "";
    el("p", {"class": "bme-intro"}, root,
       "This explorer runs the book's trained model in your browser (plain JavaScript, no " +
       "kernel). Type up to 12 digits: the encoder reads them, then the decoder picks the most " +
       "likely token, one step at a time, reading its own output.");
    var tour = el("div", {"class": "bme-tour"}, root);
    el("p", {style: "margin:0.3em 0;font-weight:600"}, tour, "A guided tour in three steps:");
    var ol = el("ol", {style: "margin-top:0"}, tour);
    var ex = index.example.join(" ");
    var tourItems = [
      ["book", ex, "The book's model on " + ex + ", decoded to the end. Look at the map (switch its layer): how " +
       "much of a row's weight lands on its outlined mirrored position?"],
      ["sharp", ex, "Chapter 21's sharp model on the same input: compare its map, and the " +
       "mean weight on the mirrored position printed under it."],
      [null, null, "Inputs each model gets wrong: "]
    ];
    tourItems.forEach(function (item, k) {
      var li = el("li", {}, ol);
      if (item[0]) {
        var b = el("button", {type: "button", "data-tour": k}, li, "Show me");
        b.addEventListener("click", function () { self.go(item[0], item[1], true); });
        el("span", {}, li, " " + item[2]);
      } else {
        el("span", {}, li, item[2]);
        index.models.forEach(function (m, i) {
          if (!m.wrong_example) return;
          var digits = m.wrong_example.digits.join(" ");
          var b = el("button", {type: "button", "data-tour": k + "-" + m.id}, li,
                     m.id === "book" ? "book's model: " + digits
                       : m.id === "sharp" ? "sharp model: " + digits : "its twin: " + digits);
          b.addEventListener("click", function () { self.go(m.id, digits, true); });
          if (i < index.models.length - 1) li.appendChild(document.createTextNode(" "));
        });
        var counts = index.models.map(function (m) {
          return m.id + ": " + m.test_wrong + " of " + m.test_total.toLocaleString("en") +
            " test inputs wrong";
        });
        el("span", {}, li, " (" + counts.join("; ") + ").");
      }
    });

    var controls = el("div", {"class": "bme-controls"}, root);
    this.input = labelled(controls, "input", "Digits to reverse (1 to 12)", {
      "data-control": "digits", type: "text", inputmode: "numeric", autocomplete: "off",
      spellcheck: "false", size: "24", value: ex});
    this.model = labelled(controls, "select", "Model", {"data-control": "model"});
    index.models.forEach(function (m) {
      el("option", {value: m.id}, self.model, m.label + " (" + m.parameters.toLocaleString("en") +
         " parameters)");
    });
    this.layer = labelled(controls, "select", "Map: decoder layer", {"data-control": "layer"});
    this.head = labelled(controls, "select", "Map: head", {"data-control": "head"});
    this.message = el("div", {"class": "bme-message", role: "alert", id: uid("message")}, root);
    this.input.setAttribute("aria-describedby", this.message.id);  // read with the box

    var stepper = el("div", {"class": "bme-stepper"}, root);
    this.first = el("button", {type: "button", "data-control": "first"}, stepper, "\u00ab Start");
    this.back = el("button", {type: "button", "data-control": "back"}, stepper, "\u25c0 Back");
    this.fwd = el("button", {type: "button", "data-control": "step"}, stepper, "Step \u25b6");
    this.play = el("button", {type: "button", "data-control": "play"}, stepper, "Play");
    this.last = el("button", {type: "button", "data-control": "last"}, stepper, "End \u00bb");
    this.status = el("span", {"class": "bme-status", "aria-live": "polite"}, stepper);
    this.output = el("div", {"class": "bme-output", role: "group", "aria-label": "decoded tokens"},
                     root);
    var panels = el("div", {"class": "bme-panels"}, root);
    this.probsBox = el("section", {}, panels);
    this.stepBox = el("section", {}, panels);
    this.mapBox = el("section", {}, panels);
    this.kvBox = el("section", {}, panels);
    this.tip = el("div", {"class": "bme-tip", role: "tooltip"}, root);

    this.input.addEventListener("input", function () { self.run(false); });
    this.input.addEventListener("keydown", function (ev) {
      if (ev.key === "Enter") { ev.preventDefault(); self.run(true); }
    });
    this.model.addEventListener("change", function () { self.run(false); });
    this.layer.addEventListener("change", function () { self.draw(); });
    this.head.addEventListener("change", function () { self.draw(); });
    this.first.addEventListener("click", function () { self.stop(); self.show(0); });
    this.back.addEventListener("click", function () { self.stop(); self.show(self.t - 1); });
    this.fwd.addEventListener("click", function () { self.stop(); self.show(self.t + 1); });
    this.last.addEventListener("click", function () { self.stop(); self.show(Infinity); });
    this.play.addEventListener("click", function () { self.toggle(); });
    this.run(false);
  }

  Explorer.prototype.info = function (id) {
    return this.index.models.filter(function (m) { return m.id === id; })[0];
  };

  Explorer.prototype.go = function (modelId, digits, toEnd) {
    this.model.value = modelId;
    this.input.value = digits;
    this.run(toEnd);
    this.input.scrollIntoView({block: "nearest"});
  };

  Explorer.prototype.setState = function (s) { this.root.setAttribute("data-state", s); };

  Explorer.prototype.run = function (toEnd) {
    var self = this, parsed = window.BookModel.parseDigits(this.input.value);
    this.stop();
    var ticket = (this.ticket = (this.ticket || 0) + 1);  // a newer request cancels older ones
    if (parsed.error) {
      this.result = null;
      this.message.textContent = parsed.error;
      this.input.setAttribute("aria-invalid", "true");
      this.setState("invalid");
      this.draw();
      return Promise.resolve(null);
    }
    this.message.textContent = "";
    this.input.removeAttribute("aria-invalid");
    var id = this.model.value;
    this.setState("loading");
    this.status.textContent = "loading " + this.info(id).file + " ...";
    return window.BookModel.load(id, BASE).then(function (m) {
      if (ticket !== self.ticket) return null;  // a newer request came meanwhile
      self.modelObj = m;
      self.fillLayers(m);
      self.result = m.decode(parsed.digits, {trace: true});
      self.digits = parsed.digits;
      self.setState("ready");
      self.show(toEnd ? Infinity : 0);
      return self.result;
    }).catch(function (err) {
      if (ticket !== self.ticket) return null;
      self.setState("failed");
      self.message.textContent = "The explorer could not load its model (" + err.message + ").";
    });
  };

  Explorer.prototype.fillLayers = function (m) {
    var keepL = this.layer.value, keepH = this.head.value;
    this.layer.textContent = "";
    this.head.textContent = "";
    for (var l = 0; l < m.L; l++) el("option", {value: String(l)}, this.layer, "layer " + l);
    el("option", {value: "mean"}, this.head, "mean of heads");
    for (var h = 0; h < m.h; h++) el("option", {value: String(h)}, this.head, "head " + h);
    this.layer.value = keepL && Number(keepL) < m.L ? keepL : String(m.L - 1);
    this.head.value = keepH === "mean" || Number(keepH) < m.h ? keepH || "mean" : "mean";
  };

  Explorer.prototype.show = function (t) {
    if (!this.result) return;
    var last = this.result.steps.length - 1;
    this.t = Math.max(0, Math.min(last, t));
    this.draw();
  };

  Explorer.prototype.stop = function () {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    this.play.textContent = "Play";
    this.play.setAttribute("aria-pressed", "false");
  };

  Explorer.prototype.toggle = function () {
    var self = this;
    if (this.timer) { this.stop(); return; }
    if (!this.result) return;
    if (this.t >= this.result.steps.length - 1) this.show(0);
    this.play.textContent = "Pause";
    this.play.setAttribute("aria-pressed", "true");
    this.timer = setInterval(function () {
      if (self.t >= self.result.steps.length - 1) { self.stop(); return; }
      self.show(self.t + 1);
    }, PLAY_MS);
  };

  Explorer.prototype.draw = function () {
    var r = this.result, self = this;
    [this.probsBox, this.stepBox, this.mapBox, this.kvBox, this.output].forEach(function (b) {
      b.textContent = "";
    });
    var off = !r;
    [this.first, this.back, this.fwd, this.play, this.last].forEach(function (b) { b.disabled = off; });
    if (!r) { this.status.textContent = ""; return; }
    var B = window.BookModel, name = B.tokenName, t = this.t, st = r.steps[t];
    var n = this.digits.length, total = r.steps.length;
    var srcNames = r.src.map(name), m = this.modelObj;
    this.back.disabled = this.first.disabled = t === 0;
    this.fwd.disabled = this.last.disabled = t === total - 1;
    var ids = m.ids, want = this.digits.slice().reverse()
      .map(function (d) { return d + ids.digit_offset; }).concat([ids.eos]);
    var correct = r.tokens.length - 1 === want.length &&
      want.every(function (id, k) { return r.tokens[k + 1] === id; });
    this.status.textContent = "Step " + (t + 1) + " of " + total + ": the decoder reads " +
      name(st.input) + " and picks " + name(st.next) + ". Output " +
      (correct ? "correct" : "wrong") + ".";

    // the output so far: <bos>, then one token per step up to this one
    el("span", {title: "decoder input 0"}, this.output, "<bos>");
    r.tokens.slice(1).forEach(function (id, k) {
      if (k > t) return;
      var cls = k === t ? "bme-now" : "";
      if (id !== want[k]) cls += " bme-wrong";
      el("span", {"class": cls.trim()}, self.output, name(id));
    });
    if (t === total - 1) {
      self.output.appendChild(document.createTextNode(correct ? "  (the reversal)"
        : "  (wrong: the reversal is " + want.map(name).join(" ") + ")"));
    }

    // next-token probabilities
    el("h4", {}, this.probsBox, "Step " + (t + 1) + ": next-token probabilities");
    var bars = el("div", {"class": "bme-bars", role: "list"}, this.probsBox);
    st.probs.forEach(function (p, id) {
      var row = el("div", {role: "listitem", style: "display:contents",
                           "class": id === st.next ? "bme-chosen" : ""}, bars);
      el("span", {}, row, name(id));
      var track = el("span", {style: "background:#eee"}, row);
      el("div", {"class": "bme-bar", style: "width:" + (100 * p).toFixed(2) + "%"}, track);
      el("span", {}, row, p < 0.0005 ? "<0.001" : p.toFixed(3));
    });

    // cross-attention of every layer and head at this step
    el("h4", {}, this.stepBox, "Step " + (t + 1) + ": cross-attention, every layer and head");
    var rows = [], w = [];
    st.cross.forEach(function (heads, l) {
      heads.forEach(function (h, k) { rows.push("layer " + l + " head " + k); w.push(h); });
      rows.push("layer " + l + " mean"); w.push(meanOfHeads(heads));
    });
    var mir = mirrorOf(n, t);
    heatmap(this, this.stepBox, rows, srcNames, w, rows.map(function () { return mir; }),
            "cross-attention of step " + (t + 1) + ", rows: decoder layer and head, columns: " +
            "source tokens");
    el("p", {style: "margin:0.2em 0;font-size:0.8rem"}, this.stepBox,
       mir >= 0 ? "outlined: the mirrored source position of this step" :
       "this step is past the input's length: no mirrored position");

    // the map so far for one layer and head
    var layer = Number(this.layer.value), head = this.head.value;
    var mapRows = [], mapW = [], mapMirror = [], onMirror = [];
    for (var s = 0; s <= t; s++) {
      var heads = r.steps[s].cross[layer];
      var v = head === "mean" ? meanOfHeads(heads) : heads[Number(head)];
      mapRows.push(name(r.steps[s].input));
      mapW.push(v);
      mapMirror.push(mirrorOf(n, s));
      if (mirrorOf(n, s) >= 0) onMirror.push(v[mirrorOf(n, s)]);
    }
    var headText = head === "mean" ? "mean of heads" : "head " + head;
    el("h4", {}, this.mapBox, "The map so far: layer " + layer + ", " + headText);
    heatmap(this, this.mapBox, mapRows, srcNames, mapW, mapMirror,
            "cross-attention map of layer " + layer + ", " + headText + ", rows: decoder " +
            "inputs of steps 1 to " + (t + 1) + ", columns: source tokens");
    if (onMirror.length) {
      var mean = onMirror.reduce(function (a, b) { return a + b; }, 0) / onMirror.length;
      el("p", {"class": "bme-mirror-mean", style: "margin:0.2em 0;font-size:0.8rem"}, this.mapBox,
         "weight on the mirrored position, mean over these rows: " + mean.toFixed(3));
    }

    // the KV cache
    el("h4", {}, this.kvBox, "The KV cache after step " + (t + 1));
    st.selfKeys.forEach(function (k, l) {
      var p = el("p", {"class": "bme-kv", style: "margin:0.2em 0"}, self.kvBox,
                 "layer " + l + " self-attention: " + k + " key" + (k === 1 ? "" : "s") + " ");
      for (var j = 0; j < k; j++) {
        el("span", {"class": j === k - 1 ? "bme-new" : "", title: "position " + j}, p,
           name(r.tokens[j]));
      }
    });
    el("p", {"class": "bme-kv", style: "margin:0.2em 0"}, this.kvBox,
       "cross-attention, every layer: " + st.crossKeys[0] + " keys and values, projected from " +
       "the encoder's output at step 1 and reused since");
    el("p", {style: "margin:0.2em 0;font-size:0.8rem"}, this.kvBox,
       "Each key and each value holds " + m.d + " numbers. Step " + (t + 1) +
       " added one key and one value to each layer's self-attention cache (orange) and " +
       "recomputed none of the others.");
  };

  Explorer.prototype.showTip = function (rect, text) {
    this.tip.textContent = text;
    var box = rect.getBoundingClientRect(), outer = this.root.getBoundingClientRect();
    this.tip.style.left = (box.right - outer.left + 6) + "px";
    this.tip.style.top = (box.top - outer.top - 4) + "px";
    this.tip.style.display = "block";
  };

  Explorer.prototype.hideTip = function () { this.tip.style.display = "none"; };

  function start(root) {
    root.setAttribute("data-state", "loading");
    loadScript("book_model.js", "BookModel")
      .then(function () { return loadScript("live_models.js", "BOOK_MODEL_INDEX"); })
      .then(function (index) { root.explorer = new Explorer(root, index); })
      .catch(function (err) {
        root.setAttribute("data-state", "failed");
        root.textContent = "The live explorer could not start (" + err.message + ").";
      });
  }

  function init() {
    var roots = document.querySelectorAll(".html-attention-explorer");
    if (!roots.length) return;
    if (!document.getElementById("bme-style")) el("style", {id: "bme-style"}, document.head, CSS);
    Array.prototype.forEach.call(roots, start);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
