// Chapter 21's live explorer in the HTML book (book_assets/attention_explorer.js; the model in
// book_assets/book_model.js; weights from tools/build/export_live_models.py), as
// tools/check/browser/live_explorer.py drives it. One object of functions (devtools.Script).
({
  // Its drawn state: controls and their labels, buttons, status, bars, heatmap cells, KV cache.
  state() {
    const root = document.querySelector('.html-attention-explorer');
    if (!root) return {found: false};
    const state = root.dataset.state || null;
    const q = s => root.querySelector(s);
    const controls = [...root.querySelectorAll('.bme-controls input, .bme-controls select')];
    const labels = controls.map(c => {
      const l = root.querySelector('label[for="' + c.id + '"]');
      return [c.dataset.control,
              !!l && l.textContent.replace(c.textContent, '').trim().length > 0];
    });
    const buttons = [...root.querySelectorAll('button')].map(b => b.textContent.trim());
    const svgs = [...root.querySelectorAll('svg.bme-svg')];
    return {found: true, state: state, labels: labels, buttons: buttons,
            status: q('.bme-status') ? q('.bme-status').textContent : null,
            message: q('.bme-message') ? q('.bme-message').textContent : null,
            output: q('.bme-output') ? q('.bme-output').textContent : null,
            bars: root.querySelectorAll('.bme-bar').length,
            step_cells: svgs[0] ? svgs[0].querySelectorAll('rect.bme-cell').length : 0,
            map_cells: svgs[1] ? svgs[1].querySelectorAll('rect.bme-cell').length : 0,
            mirrors: root.querySelectorAll('rect.bme-mirror').length,
            kv: [...root.querySelectorAll('.bme-kv')].map(p => p.textContent),
            model: q('select[data-control="model"]')
                ? q('select[data-control="model"]').value : null,
            text: state === 'failed' ? root.textContent.slice(0, 200) : ''};
  },

  // Set a control (the digits input, the model select) as a reader would; its value back.
  set(control, value, event) {
    const c = document.querySelector(
        '.html-attention-explorer [data-control="' + control + '"]');
    c.value = value;
    c.dispatchEvent(new Event(event, {bubbles: true}));
    return c.value;
  },

  click(control) {
    document.querySelector(
        '.html-attention-explorer button[data-control="' + control + '"]').click();
    return true;
  },

  // Focus one cell of the step heatmap (as the keyboard does): its weight, fill and tooltip;
  // then ArrowRight, and which cell has the focus.
  focusCell(row, col) {
    const root = document.querySelector('.html-attention-explorer');
    const cell = root.querySelector(
        'svg.bme-svg rect.bme-cell[data-row="' + row + '"][data-col="' + col + '"]');
    cell.focus();
    const tip = root.querySelector('.bme-tip');
    const out = {weight: cell.dataset.weight, fill: cell.getAttribute('fill'),
                 tip: tip.textContent, tip_shown: getComputedStyle(tip).display !== 'none',
                 focused: document.activeElement === cell};
    cell.dispatchEvent(new KeyboardEvent('keydown', {key: 'ArrowRight', bubbles: true}));
    const now = document.activeElement;
    out.after_right = now && now.dataset ? [now.dataset.row, now.dataset.col].join(',') : null;
    return out;
  },

  // Every model loaded, then every input decoded in the page, in one call: the tokens of each,
  // the logits of every step for the inputs at logitIndices, the time per decode; and erf on
  // a grid.
  async decodeAll(inputs, logitIndices, models, grid) {
    const src = document.querySelector('script[src$="attention_explorer.js"]').src;
    const base = src.slice(0, src.lastIndexOf('/') + 1);
    const logitsFor = new Set(logitIndices), out = {};
    for (const id of models) {
      await window.BookModel.load(id, base);
      const t0 = performance.now();
      const runs = inputs.map(d => window.BookModel.decode(id, d));
      const ms = (performance.now() - t0) / inputs.length;
      out[id] = {ms: ms, tokens: runs.map(r => r.tokens),
                 logits: runs.map((r, i) => logitsFor.has(i) ? r.logits : null)};
    }
    out.erf = grid.map(x => window.BookModel.erf(x));
    return out;
  },
})
