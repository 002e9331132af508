/* The HTML book's cross-attention explorer (chapter 18): no kernel, no framework, no CDN.
 *
 * Every <div class="html-attention-explorer" data-src="URL"> on the page gets an explorer.
 * URL (relative to the page) is the JSON written by tools/export_attention.py: for each
 * model and input, the teacher-forced cross-attention weights of every decoder layer, every
 * head and their mean. Controls are native, labelled <select>s; the heatmap is SVG, one
 * <rect> per weight (rows: decoder input tokens, columns: source tokens), coloured with
 * matplotlib's "Blues" from 0 to 1 as the book's static figures (helpers.plot_attention).
 * The mirrored source column of each row is outlined. Hover or focus a cell for its source
 * token, output token and weight; arrow keys move between cells, Home/End along a row.
 */
(function () {
  "use strict";

  var SVG_NS = "http://www.w3.org/2000/svg";
  // matplotlib's Blues: ColorBrewer's nine stops, evenly spaced from 0 to 1
  var BLUES = ["#f7fbff", "#deebf7", "#c6dbef", "#9ecae1", "#6baed6",
               "#4292c6", "#2171b5", "#08519c", "#08306b"];
  var CELL = 34, LEFT = 64, TOP = 40, BAR = 14;

  var CSS = [
    ".html-attention-explorer{position:relative;margin:1em 0;font-size:0.9rem}",
    ".hae-controls{display:flex;flex-wrap:wrap;gap:0.5em 1.2em;margin-bottom:0.5em}",
    ".hae-controls label{display:flex;flex-direction:column;font-weight:600}",
    ".hae-controls select{font-weight:normal;min-width:7em}",
    ".hae-status{margin:0.3em 0}",
    ".hae-svg rect.hae-cell:focus{outline:none;stroke:#d62728;stroke-width:3}",
    ".hae-svg text{font-family:sans-serif;font-size:12px}",
    ".hae-tip{position:absolute;pointer-events:none;background:#fff;border:1px solid #666;",
    "padding:0.2em 0.5em;border-radius:3px;box-shadow:0 1px 3px rgba(0,0,0,.3);",
    "white-space:nowrap;display:none;z-index:10}"
  ].join("");

  function hexToRgb(h) {
    return [1, 3, 5].map(function (i) { return parseInt(h.substr(i, 2), 16); });
  }
  var STOPS = BLUES.map(hexToRgb);

  /* weight in [0, 1] -> "rgb(r,g,b)", linear between the stops (as matplotlib's map) */
  function blues(v) {
    var x = Math.min(1, Math.max(0, v)) * (STOPS.length - 1);
    var i = Math.min(STOPS.length - 2, Math.floor(x)), t = x - i;
    var a = STOPS[i], b = STOPS[i + 1];
    var c = a.map(function (ai, k) { return Math.round(ai + (b[k] - ai) * t); });
    return "rgb(" + c.join(",") + ")";
  }

  function el(tag, attrs, parent) {
    var node = tag.indexOf("svg:") === 0
      ? document.createElementNS(SVG_NS, tag.slice(4)) : document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (parent) parent.appendChild(node);
    return node;
  }

  function svgText(parent, x, y, text, attrs) {
    var t = el("svg:text", Object.assign({x: x, y: y}, attrs || {}), parent);
    t.textContent = text;
    return t;
  }

  function addStyle() {
    if (document.getElementById("hae-style")) return;
    var style = el("style", {id: "hae-style"}, document.head);
    style.textContent = CSS;
  }

  var counter = 0;

  function select(controls, name, text) {
    var id = "hae-" + (++counter) + "-" + name;
    var label = el("label", {"for": id}, controls);
    label.appendChild(document.createTextNode(text));
    return el("select", {id: id, name: name, "data-control": name}, label);
  }

  function fill(sel, options, keep) {
    var old = sel.value;
    sel.textContent = "";
    options.forEach(function (o) {
      var opt = el("option", {value: o[0]}, sel);
      opt.textContent = o[1];
    });
    if (keep && options.some(function (o) { return o[0] === old; })) sel.value = old;
  }

  function Explorer(root, data) {
    this.root = root;
    this.data = data;
    root.textContent = "";
    var intro = el("p", {"class": "hae-intro"}, root);
    intro.textContent = "This explorer needs no kernel: it draws cross-attention weights " +
      "computed beforehand (" + data.generated_by + ") for " + data.inputs.length +
      " inputs and " + data.models.length + " models, every decoder layer and head, under " +
      "teacher forcing (rows: <bos> and the true reversal). Hover or focus a cell for its " +
      "weight; the arrow keys move between cells.";
    var controls = el("div", {"class": "hae-controls"}, root);
    this.input = select(controls, "input", "input");
    this.model = select(controls, "model", "model");
    this.layer = select(controls, "layer", "decoder layer");
    this.head = select(controls, "head", "head");
    this.status = el("p", {"class": "hae-status", "aria-live": "polite"}, root);
    this.figure = el("div", {"class": "hae-figure"}, root);
    this.tip = el("div", {"class": "hae-tip", role: "tooltip"}, root);
    fill(this.input, data.inputs.map(function (x) {
      return [x.id, x.digits.join(" ") + "  (" + x.label + ")"];
    }));
    fill(this.model, data.models.map(function (m) { return [m.id, m.label]; }));
    var self = this;
    this.model.addEventListener("change", function () { self.fillLayers(); self.draw(); });
    [this.input, this.layer, this.head].forEach(function (s) {
      s.addEventListener("change", function () { self.draw(); });
    });
    this.fillLayers();
    this.draw();
  }

  Explorer.prototype.modelInfo = function () {
    var id = this.model.value;
    return this.data.models.filter(function (m) { return m.id === id; })[0];
  };

  Explorer.prototype.fillLayers = function () {
    var m = this.modelInfo(), layers = [], heads = [];
    for (var i = 0; i < m.layers; i++) layers.push([String(i), "layer " + i]);
    heads.push(["mean", "mean of heads"]);
    for (var h = 0; h < m.heads; h++) heads.push([String(h), "head " + h]);
    var lastLayer = this.layer.options.length === 0;
    fill(this.layer, layers, true);
    if (lastLayer) this.layer.value = String(m.layers - 1);  // the layer the chapter shows
    fill(this.head, heads, true);
  };

  Explorer.prototype.draw = function () {
    var m = this.modelInfo();
    var entry = this.data.maps[m.id][this.input.value];
    var layer = Number(this.layer.value);
    var headIndex = this.head.value === "mean" ? m.heads : Number(this.head.value);
    var w = entry.layers[layer][headIndex];
    var rows = entry.rows, cols = entry.cols;
    var headText = this.head.value === "mean" ? "mean of heads" : "head " + this.head.value;
    this.status.textContent = m.label + ", layer " + layer + ", " + headText +
      ". Greedy output: " + entry.output.join(" ") +
      (entry.correct ? " (correct)" : " (wrong: the rows are the true reversal)") + ".";

    var width = LEFT + cols.length * CELL + 70, height = TOP + rows.length * CELL + 44;
    this.figure.textContent = "";
    var svg = el("svg:svg", {
      "class": "hae-svg", width: width, height: height, viewBox: "0 0 " + width + " " + height,
      role: "group", "aria-label": "cross-attention heatmap: rows are decoder input tokens, " +
        "columns are source tokens; use the arrow keys to move between cells",
      "data-view": [this.input.value, m.id, layer, this.head.value].join("|"),
      "data-weights": JSON.stringify(w)
    }, this.figure);
    svgText(svg, LEFT + cols.length * CELL / 2, 14, "source token (key)",
            {"text-anchor": "middle"});
    svgText(svg, 12, TOP + rows.length * CELL / 2, "decoder input (query)",
            {"text-anchor": "middle",
             transform: "rotate(-90 12 " + (TOP + rows.length * CELL / 2) + ")"});
    cols.forEach(function (c, j) {
      svgText(svg, LEFT + j * CELL + CELL / 2, TOP - 8, c, {"text-anchor": "middle"});
    });
    rows.forEach(function (r, i) {
      svgText(svg, LEFT - 6, TOP + i * CELL + CELL / 2 + 4, r, {"text-anchor": "end"});
    });
    var self = this, cells = [];
    w.forEach(function (row, i) {
      row.forEach(function (v, j) {
        var rect = el("svg:rect", {
          "class": "hae-cell", x: LEFT + j * CELL, y: TOP + i * CELL, width: CELL, height: CELL,
          fill: blues(v), tabindex: i === 0 && j === 0 ? "0" : "-1",
          "data-row": i, "data-col": j, "data-weight": String(v),
          "aria-label": "output token " + rows[i] + ", source token " + cols[j] +
            ", weight " + v.toFixed(3) + (entry.mirror[i] === j ? ", mirrored column" : "")
        }, svg);
        cells.push(rect);
        if (v >= 0.05) {
          svgText(svg, LEFT + j * CELL + CELL / 2, TOP + i * CELL + CELL / 2 + 4, v.toFixed(1), {
            "text-anchor": "middle", "font-size": "10", "pointer-events": "none",
            fill: v > 0.6 ? "white" : "black"
          });
        }
        rect.addEventListener("mouseenter", function () { self.show(rect, i, j, entry, w); });
        rect.addEventListener("mouseleave", function () { self.hide(); });
        rect.addEventListener("focus", function () { self.show(rect, i, j, entry, w); });
        rect.addEventListener("blur", function () { self.hide(); });
        rect.addEventListener("keydown", function (ev) { self.key(ev, i, j, rows, cols, cells); });
      });
    });
    entry.mirror.forEach(function (j, i) {  // outline each row's mirrored column
      el("svg:rect", {
        "class": "hae-mirror", x: LEFT + j * CELL + 1.5, y: TOP + i * CELL + 1.5,
        width: CELL - 3, height: CELL - 3, fill: "none", stroke: "#ff7f0e",
        "stroke-width": 2, "pointer-events": "none", "data-row": i, "data-col": j
      }, svg);
    });
    // colour bar, 0 to 1
    var bx = LEFT + cols.length * CELL + 16, by = TOP, bh = rows.length * CELL;
    var defs = el("svg:defs", {}, svg);
    var gid = "hae-grad-" + (++counter);
    var grad = el("svg:linearGradient", {id: gid, x1: 0, y1: 1, x2: 0, y2: 0}, defs);
    BLUES.forEach(function (c, k) {
      el("svg:stop", {offset: k / (BLUES.length - 1), "stop-color": c}, grad);
    });
    el("svg:rect", {x: bx, y: by, width: BAR, height: bh, fill: "url(#" + gid + ")",
                    stroke: "#999"}, svg);
    svgText(svg, bx + BAR + 4, by + 10, "1");
    svgText(svg, bx + BAR + 4, by + bh, "0");
    svgText(svg, LEFT, TOP + rows.length * CELL + 20,
            "outlined: the mirrored source token of each row", {"font-size": "11"});
    this.root.setAttribute("data-state", "drawn");
  };

  Explorer.prototype.show = function (rect, i, j, entry, w) {
    this.tip.textContent = "output token " + entry.rows[i] + " (row " + i + "), source token " +
      entry.cols[j] + " (column " + j + "): weight " + w[i][j].toFixed(3) +
      (entry.mirror[i] === j ? ", mirrored" : "");
    var box = rect.getBoundingClientRect(), outer = this.root.getBoundingClientRect();
    this.tip.style.left = (box.right - outer.left + 6) + "px";
    this.tip.style.top = (box.top - outer.top - 4) + "px";
    this.tip.style.display = "block";
    this.tip.setAttribute("data-row", i);
    this.tip.setAttribute("data-col", j);
  };

  Explorer.prototype.hide = function () { this.tip.style.display = "none"; };

  Explorer.prototype.key = function (ev, i, j, rows, cols, cells) {
    var ni = i, nj = j;
    if (ev.key === "ArrowUp") ni = Math.max(0, i - 1);
    else if (ev.key === "ArrowDown") ni = Math.min(rows.length - 1, i + 1);
    else if (ev.key === "ArrowLeft") nj = Math.max(0, j - 1);
    else if (ev.key === "ArrowRight") nj = Math.min(cols.length - 1, j + 1);
    else if (ev.key === "Home") nj = 0;
    else if (ev.key === "End") nj = cols.length - 1;
    else return;
    ev.preventDefault();
    var next = cells[ni * cols.length + nj];
    cells.forEach(function (c) { c.setAttribute("tabindex", "-1"); });
    next.setAttribute("tabindex", "0");
    next.focus();
  };

  // The data comes as a script that sets window.ATTENTION_EXPLORER_DATA (written by
  // tools/export_attention.py): a fetch() of a JSON file is refused when the book is opened
  // from disk (file://), a <script src> from the same folder is not. data-src names that script;
  // an older page naming attention_explorer.json gets the script beside it.
  var DATA_GLOBAL = "ATTENTION_EXPLORER_DATA";
  var pending = null;

  function loadData(src) {
    if (window[DATA_GLOBAL]) return Promise.resolve(window[DATA_GLOBAL]);
    if (pending) return pending;
    pending = new Promise(function (resolve, reject) {
      var s = document.createElement("script");
      s.src = src.replace(/attention_explorer\.json$/, "attention_explorer_data.js");
      s.onload = function () {
        if (window[DATA_GLOBAL]) resolve(window[DATA_GLOBAL]);
        else reject(new Error(s.src + " did not define its data"));
      };
      s.onerror = function () { reject(new Error("could not load " + s.src)); };
      document.head.appendChild(s);
    });
    return pending;
  }

  function start(root) {
    loadData(root.getAttribute("data-src"))
      .then(function (data) { new Explorer(root, data); })
      .catch(function (err) {
        root.setAttribute("data-state", "failed");
        root.textContent = "The attention explorer could not load its data (" + err.message + ").";
      });
  }

  function init() {
    var roots = document.querySelectorAll(".html-attention-explorer[data-src]");
    if (!roots.length) return;
    addStyle();
    Array.prototype.forEach.call(roots, start);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
