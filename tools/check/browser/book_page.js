// What tools/check/browser/book_pages.py reads from each page of the HTML book. One object of
// functions: the check evaluates `(this file).report()` in the page (devtools.Script).
({
  // Once MathJax has typeset and every image has loaded (or failed, or 10 s passed): the math
  // elements with and without MathJax output, and the images that did not load.
  async report() {
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      await MathJax.startup.promise;
      if (MathJax.typesetPromise) { await MathJax.typesetPromise(); }
    }
    const imgs = [...document.images];
    await Promise.all(imgs.map(img => {
      img.loading = 'eager';
      if (img.complete) return null;
      return new Promise(r => { img.onload = img.onerror = r; setTimeout(r, 10000); });
    }));
    const math = [...document.querySelectorAll('.math')];
    return {
      title: document.title,
      math: math.length,
      rendered: math.filter(el => el.querySelector('mjx-container')).length,
      raw: math.filter(el => !el.querySelector('mjx-container')).slice(0, 3)
               .map(el => el.textContent.slice(0, 60)),
      mathjax: !!window.MathJax,
      images: imgs.length,
      broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0))
                  .map(i => i.getAttribute('src').slice(0, 80)),
    };
  },

  // Exercise solutions: a code cell tagged hide-input becomes <details class="hide
  // above-input"> around the cell's source. Every solution must start closed (its code not
  // rendered); for the first one, clicking its summary must show the code.
  solutions() {
    const sols = [...document.querySelectorAll('details.above-input')]
        .filter(d => d.textContent.includes('# Solution to exercise'));
    // checkVisibility: the content of a closed <details> keeps its layout boxes in Chromium
    // (content-visibility: hidden), so getClientRects alone would call it visible
    const visible = el => !!el && el.checkVisibility() && el.offsetHeight > 0;
    const open = sols.filter(d => d.open || visible(d.querySelector('pre')));
    // written-out answers to predictions: sphinx-design dropdowns, closed at load
    const answers = [...document.querySelectorAll('details.sd-dropdown')]
        .filter(d => d.querySelector('summary').textContent.includes('Answer to exercise'));
    const answers_open = answers.filter(d => d.open).length;
    let expanded = null;
    if (sols.length) {
      const d = sols[0];
      d.querySelector('summary').click();
      const pre = d.querySelector('pre');
      expanded = {open: d.open, shown: visible(pre),
                  starts: pre ? pre.innerText.trim().slice(0, 40) : ''};
    }
    return {solutions: sols.length, open_at_load: open.length, expanded: expanded,
            answers: answers.length, answers_open: answers_open};
  },
})
