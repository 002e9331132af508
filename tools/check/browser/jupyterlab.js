// JupyterLab as tools/check/browser/lab_chapter.py and lab_markup.py drive it, through the app
// that --LabApp.expose_app_in_browser puts on window.jupyterapp. One object of functions
// (devtools.Script); `path` is a notebook's path under JupyterLab's root folder.
({
  // the open notebook's panel (undefined when it is not open)
  notebook(path) {
    return [...window.jupyterapp.shell.widgets('main')]
        .find(w => w.context && w.context.path === path);
  },

  // The notebook's kernel and cells: ready, kernel status, code cells executed and running,
  // error outputs. null before JupyterLab is up.
  state(path) {
    if (!window.jupyterapp) return null;
    const panel = this.notebook(path);
    if (!panel || !panel.content || !panel.sessionContext) return {ready: false};
    const s = panel.sessionContext;
    const cells = panel.content.widgets.filter(c => c.model.type === 'code');
    const outputs = cells.flatMap(c => c.model.outputs.toJSON());
    return {
      ready: s.isReady && !!s.session && !!s.session.kernel,
      kernel: s.session && s.session.kernel ? s.session.kernel.status : 'none',
      code_cells: cells.length,
      executed: cells.filter(c => c.model.executionCount !== null).length,
      running: document.querySelectorAll('.jp-InputPrompt').length
               ? [...document.querySelectorAll('.jp-InputPrompt')]
                   .filter(p => p.textContent.includes('*')).length : 0,
      errors: outputs.filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue),
    };
  },

  // The kernel the notebook runs in, and what that kernel sees: its name, and its pinned
  // numerics (ATEN_CPU_CAPABILITY, MKL_CBWR, the capability torch reports).
  async kernelEnv(path) {
    const kernel = this.notebook(path).sessionContext.session.kernel;
    let text = '';
    const future = kernel.requestExecute({
      code: "import os, torch; print(os.environ.get('ATEN_CPU_CAPABILITY'), "
          + "os.environ.get('MKL_CBWR'), torch.backends.cpu.get_cpu_capability())",
      silent: false, store_history: false});
    future.onIOPub = msg => { if (msg.header.msg_type === 'stream') text += msg.content.text; };
    await future.done;
    return {name: kernel.name, seen: text.trim()};
  },

  // Make the notebook the current widget: commands such as runmenu:run-all act on it.
  activate(path) {
    const app = window.jupyterapp;
    const panel = this.notebook(path);
    app.shell.activateById(panel.id);
    panel.content.activate();
    return panel.id;
  },

  hasCurrentWidget() {
    return !!window.jupyterapp.shell.currentWidget;
  },

  // A JupyterLab command; true once its promise settles (run-all: when the last cell ran).
  execute(command, args) {
    return window.jupyterapp.commands.execute(command, args).then(() => true);
  },

  // Shut the notebook's kernel down and close it.
  close(path) {
    const w = this.notebook(path);
    if (w) { w.context.sessionContext.shutdown(); w.dispose(); }
    return true;
  },

  // Exercise solutions: cells whose source starts "# Solution to exercise" must open with
  // their input collapsed (cell metadata jupyter.source_hidden: JupyterLab shows a placeholder
  // instead of the editor).
  solutions(path) {
    const visible = el => !!el && el.checkVisibility() && el.offsetHeight > 0;
    const sols = this.notebook(path).content.widgets.filter(
        c => c.model.sharedModel.getSource().startsWith('# Solution to exercise'));
    return sols.map(c => ({
      hidden: c.inputHidden,
      placeholder: visible(c.node.querySelector('.jp-InputPlaceholder')),
      editor: visible(c.node.querySelector('.jp-InputArea-editor')),
    }));
  },

  // Click the first solution's placeholder: is its code shown?
  async expandSolution(path) {
    const c = this.notebook(path).content.widgets.find(
        c => c.model.sharedModel.getSource().startsWith('# Solution to exercise'));
    c.node.scrollIntoView();
    c.node.querySelector('.jp-InputPlaceholder').click();
    await new Promise(r => setTimeout(r, 500));
    const editor = c.node.querySelector('.jp-InputArea-editor');
    const shown = !!editor && editor.checkVisibility() && editor.offsetHeight > 0;
    return {hidden: c.inputHidden, shown: shown,
            text: editor ? editor.innerText.trim().slice(0, 40) : ''};
  },

  // The widget explorer: the widget box with class attention-explorer (the last one on the
  // page).
  explorerBox() {
    const boxes = document.querySelectorAll('.attention-explorer');
    return boxes.length ? boxes[boxes.length - 1] : null;
  },

  // The explorer's layer options, its heatmap and status. The heatmap is an ipywidgets Image
  // (an <img> with a blob: URL, replaced on every change): we hash the PNG bytes behind it, so
  // "the heatmap changed" means different image data. null before the widget is drawn.
  async explorer() {
    const box = this.explorerBox();
    if (!box) return null;
    const select = [...box.querySelectorAll('.widget-dropdown')]
        .find(d => d.querySelector('label').textContent.trim() === 'layer')
        .querySelector('select');
    const img = box.querySelector('img');
    const shown = !!img && getComputedStyle(img).display !== 'none' && img.naturalWidth > 0;
    let hash = null, bytes = 0;
    if (shown) {
      const data = new Uint8Array(await (await fetch(img.src)).arrayBuffer());
      let h = 0x811c9dc5;
      for (const b of data) { h ^= b; h = Math.imul(h, 0x01000193) >>> 0; }
      hash = h.toString(16); bytes = data.length;
    }
    const status = box.querySelector('.explorer-status');
    return {
      options: [...select.options].map(o => o.textContent.replace(/\u00a0/g, ' ')),
      selected: select.selectedIndex,
      shown: shown, hash: hash, bytes: bytes, width: shown ? img.naturalWidth : 0,
      status: status ? status.textContent : null,
      tracebacks: box.querySelectorAll('[data-mime-type="application/vnd.jupyter.stderr"]')
          .length,
    };
  },

  scrollToExplorer() {
    document.querySelector('.attention-explorer').scrollIntoView();
  },

  // Choose option `index` of the explorer's dropdown labelled `label`; the option's text.
  selectOption(label, index) {
    const select = [...this.explorerBox().querySelectorAll('.widget-dropdown')]
        .find(d => d.querySelector('label').textContent.trim() === label)
        .querySelector('select');
    select.selectedIndex = index;
    select.dispatchEvent(new Event('change', {bubbles: true}));
    return select.options[index].textContent.replace(/\u00a0/g, ' ');
  },

  // Type `text` into the explorer's text box labelled `label` and press Enter.
  typeText(label, text) {
    const input = [...this.explorerBox().querySelectorAll('.widget-text')]
        .find(d => d.querySelector('label').textContent.trim() === label)
        .querySelector('input');
    input.value = text;
    input.dispatchEvent(new Event('input', {bubbles: true}));
    input.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter', bubbles: true}));
    return input.value;
  },

  // The notebook's markdown as jupyterlab-myst rendered it: cells rendered, MyST nodes,
  // <details> (open or not), images (loaded or not), and each cell's text. null until the
  // notebook has cells.
  markup(path) {
    const panel = window.jupyterapp && this.notebook(path);
    if (!panel || !panel.content || !panel.content.widgets.length) return null;
    const md = panel.content.widgets.filter(c => c.model.type === 'markdown');
    const nodes = md.map(c => c.node);
    const texts = nodes.map(n => n.innerText);
    const imgs = nodes.flatMap(n => [...n.querySelectorAll('img')]);
    return {
      markdown_cells: md.length,
      rendered: texts.filter(t => t.trim().length > 0).length,
      myst_nodes: nodes.reduce((k, n) => k + n.querySelectorAll('[class*=myst]').length, 0),
      details: nodes.reduce((k, n) => k + n.querySelectorAll('details').length, 0),
      open_details: nodes.reduce((k, n) => k + n.querySelectorAll('details[open]').length, 0),
      images: imgs.length,
      images_loaded: imgs.filter(i => i.complete && i.naturalWidth > 0).length,
      texts: texts,
    };
  },
})
