"""The sharp-attention Experiments page and chapter 21 quote the records they cite correctly.

Each number the page's prose or chapter 21's prose quotes from chapters/data/ch21_sharpness.json,
ch21_seed_recipe.json, ch21_training_time.json, seed_recipe_run.json or kernel_spread.json is
recomputed here from the record (with helpers.analysis.experiments) and looked up, formatted as the
prose
writes it, in the markdown of the .py twins.
"""

import functools
from pathlib import Path

import numpy as np
import pytest
from twin_prose import prose as twin_prose

from helpers import SEED_RECIPE, SHARP_ATTENTION_RECIPE
from helpers.analysis.experiments import load_record, mean_interval

prose = functools.partial(twin_prose, markdown_only=True)  # markdown cells only
ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "appendix" / "experiment_sharp_attention.py"
CHAPTER = ROOT / "chapters" / "21_cross_attention_heatmaps.py"
FINAL, TWIN = "sharp1000d15", "sharp1000d15default"


@pytest.fixture(scope="module")
def page():
    return prose(PAGE)


@pytest.fixture(scope="module")
def chapter():
    return prose(CHAPTER)


@pytest.fixture(scope="module")
def runs():
    return {(r["name"], r["seed"]): r for r in load_record("ch21_sharpness")["runs"]}


def last(runs, name, key, layer=-1, seed=0):
    return runs[(name, seed)]["points"][-1][key][layer]


def test_prose_reader_keeps_markdown_only():
    text = prose(PAGE)
    assert "## Question" in text and "load_record(" not in text


def test_final_recipe_interval_over_three_seeds(runs, page, chapter):
    seeds = sorted(s for n, s in runs if n == FINAL)
    assert seeds == [0, 1, 2] and runs[(FINAL, 0)]["key"] == SHARP_ATTENTION_RECIPE.key()
    iv = mean_interval([last(runs, FINAL, "mirror", seed=s) for s in seeds])
    quoted = "0.894 (95 % interval 0.863 to 0.925)"
    assert f"{iv.mean:.3f} (95 % interval {iv.low:.3f} to {iv.high:.3f})" == quoted
    assert f"mirror weight is {quoted}" in page  # Results
    assert "puts 0.894 on the mirrored position (95 % interval 0.863 to 0.925)" in page
    assert "Three seeds of the final recipe put 0.894 on the mirrored position in the last " \
        "layer, on average (95 % interval 0.863 to 0.925)" in chapter  # fmt: skip


def test_final_recipe_eos_peak_per_seed(runs, page):
    values = [last(runs, FINAL, "eos_peak", seed=s) for s in (0, 1, 2)]
    assert [f"{v:.2f}" for v in values] == ["0.98", "0.93", "0.86"]
    assert "0.98, 0.93 and 0.86" in page
    iv = mean_interval(values)
    assert f"{iv.low:.3f}" == "0.774" and iv.high > 1
    assert "an interval from 0.774 to above 1" in page
    assert min(values) == pytest.approx(0.86) and "at least 0.86 in each of the three runs" in page


def test_one_run_jitter(runs, page):
    trail = [p["eos_peak"][-1] for p in runs[("d32h1drop", 0)]["points"][-4:]]
    assert " -> ".join(f"{v:.2f}" for v in trail) == "0.28 -> 0.60 -> 0.34 -> 0.35"
    assert "went 0.28 -> 0.60 -> 0.34 -> 0.35 over its last four checkpoints" in page


def test_lever_observations(runs, page):
    assert f"{last(runs, 'd32h4', 'mirror'):.3f}" == "0.599"
    assert (
        runs[("d32h4", 0)]["points"][-1]["val_exact"] == 1.0
        and runs[("d32h4", 0)]["points"][-1]["step"] == 1500
    )
    assert "to a validation exact match of 1.000, ended at 0.599" in page
    by_heads = {}
    for (name, seed), r in runs.items():
        cfg = r["config"]
        if cfg["init"] != "fixed" or seed:
            continue
        by_heads.setdefault(cfg["d_model"] // cfg["num_heads"], []).append(
            (cfg["num_heads"], last(runs, name, "mirror"))
        )
    d8 = sorted(m for _, m in by_heads[8])
    assert [f"{m:.3f}" for m in d8] == ["0.599", "0.796"] and max(d8) < 0.8
    assert "heads of $d_k = 8$ ended at 0.599 and 0.796" in page
    one_head = sorted(m for dk in (32, 64) for h, m in by_heads[dk] if h == 1)
    assert f"{one_head[0]:.3f}" == "0.589" and f"{one_head[-1]:.3f}" == "0.780"
    assert "one head of 32 or 64 ended between 0.589 and 0.780" in page
    above = [
        n
        for (n, s), r in runs.items()
        if last(runs, n, "mirror", seed=s) > 0.8
    ]  # fmt: skip
    assert all(
        runs[(n, 0)]["config"]["num_heads"] == 2 and runs[(n, 0)]["config"]["d_model"] == 64
        for n in above
    )
    assert "Only runs with two heads of 32 at $d_{model} = 64$ ended above 0.8" in page
    for name in ("d32h1dropls", "d32h1drop2"):
        assert last(runs, name, "eos_peak") == 0
    assert runs[("d32h1drop2", 0)]["points"][-1]["val_exact"] < 0.8
    best = max(runs, key=lambda ns: last(runs, ns[0], "mirror", seed=ns[1]))
    assert (
        best == ("d64h2droplr2", 0)
        and f"{last(runs, best[0], 'mirror', seed=best[1]):.3f}" == "0.943"
    )
    assert runs[best]["points"][-1]["step"] == 1200
    assert "highest last-layer mirror weight of any run was 0.943, by `d64h2droplr2` (1200" in page


def test_kernel_path_of_each_run(runs, page):
    """Only the final recipe's seeds and its twin ran under the pin, so of the lever lines only
    `sharp1000` -> the final recipe (seed 0) crosses kernel paths, as the page says."""
    pinned = sorted(f"{n}/{s}" for (n, s), r in runs.items() if r["numerics"]["pinned"])
    assert pinned == [f"{FINAL}/0", f"{FINAL}/1", f"{FINAL}/2", f"{TWIN}/0"]
    assert load_record("ch21_seed_recipe")["runs"][0]["numerics"]["pinned"]
    assert "`sharp1000` ran on the CPU's own kernels, the final recipe under the book's pin" in page
    assert "The other arms ran earlier with a CPU's own kernels" in page


def test_budgets_and_data(runs, page):
    steps = sorted({r["points"][-1]["step"] for r in runs.values()})
    assert steps == [1000, 1200, 1500]
    seed_run = load_record("ch21_seed_recipe")["runs"][0]
    assert seed_run["points"][-1]["step"] == SEED_RECIPE.max_steps == 3120
    assert "1000, 1200 or 1500 steps, and 3120 for `SEED_RECIPE`" in page
    configs = [r["config"] for r in runs.values()] + [seed_run["config"]]
    assert {(c["train_size"], c["data_seed"], c["val_seed"]) for c in configs} == {(20_000, 0, 1)}
    tested = sorted(f"{n}/{s}" for (n, s), r in runs.items() if "test" in r)
    assert tested == [f"{FINAL}/0", f"{FINAL}/1", f"{FINAL}/2", f"{TWIN}/0"]
    assert "test" in seed_run
    assert (
        "since 2026-11-30 also store the trained model's test-set exact match"
        in (load_record("ch21_sharpness")["description"])
    )
    assert "The 10,000-sequence test set was scored only for the runs recorded since 2026-11-30" \
        in page  # fmt: skip
    assert {c["val_size"] for c in configs} == {1000}
    assert "Validation exact match uses 1000 sequences (seed 1)" in page


def test_kernel_paths(page):
    spread = load_record("kernel_spread")["results"]

    def widest(part, keys):
        return max(
            float(
                np.ptp(np.array([r[part][k] for r in spread.values() if part in r]), axis=0).max()
            )
            for k in keys
        )

    assert round(widest("sharp", ("mirror", "eos_peak")), 3) <= 0.02
    assert "the paths moved its numbers by at most 0.02" in page
    eos = np.array([r["book"]["eos_peak"][-1] for r in spread.values()])
    assert f"{np.ptp(eos):.3f}" == "0.195"
    assert "moved the last layer's `<eos>` peak by 0.195" in page
    assert len({r["book"]["stop_step"] for r in spread.values()}) == len(spread)


def test_twin(runs, page):
    t = runs[(TWIN, 0)]["test"]
    assert f"{t['correct'] / t['n']:.2%}".replace("%", " %") == "29.66 %"
    assert "the twin got 29.66 % of the test sequences right" in page


def test_seed_recipe(page, chapter):
    run = load_record("ch21_seed_recipe")["runs"][0]
    assert run["key"] == SEED_RECIPE.key() and run["seed"] == 0
    assert f"{run['points'][-1]['mirror'][-1]:.3f}" == "0.952"
    assert "`SEED_RECIPE` put 0.952 on the mirrored position in its last layer" in page
    assert "`SEED_RECIPE` (seed 0) put 0.952 on the mirrored position in its last layer" in chapter
    weights = np.array(run["maps"][-1]["weights"])
    on = np.r_[np.fliplr(weights[:-1, :-1]).diagonal(), weights[-1, -1]]
    assert run["maps"][-1]["digits"] == [7, 3, 0, 9, 5, 1, 8] and on.min() >= 0.94
    assert "every row of its map of `7 3 0 9 5 1 8` put at least 0.94 there" in page
    seen = {r.max_steps * r.batch_size for r in (SEED_RECIPE, SHARP_ATTENTION_RECIPE)}
    assert seen == {199_680, 128_000}
    assert "It sees 199,680 training sequences to the final recipe's 128,000" in page


def test_training_times(page, chapter):
    timing = load_record("ch21_training_time")
    for threads, quoted in ((1, "75.1"), (2, "53.9")):
        secs = [r["seconds"] for r in timing["runs"] if r["threads"] == threads]
        assert all(r["steps"] == SHARP_ATTENTION_RECIPE.max_steps for r in timing["runs"])
        assert f"{np.median(secs):.1f}" == quoted == f"{timing['median_seconds'][str(threads)]}"
    assert "On one thread the final recipe took a median of 75.1 s, on two 53.9 s" in page
    assert "training it took a median of 75.1 s" in chapter
    other = load_record("seed_recipe_run")
    assert other["seconds_total"] == 271.5 and other["numerics"]["cpu"] != timing["numerics"]["cpu"]
    assert "`SEED_RECIPE` took 271.5 s on the other CPU" in page
    assert "times are printed, not compared" in page


def test_html_explorer(chapter):
    """The chapter's HTML explorer is the live one (book_assets/attention_explorer.js running
    the weights tools/build/export_live_models.py writes), and the prose names its three models."""
    from tools.build.export_live_models import INDEX_FILE, read_script

    md = CHAPTER.read_text()
    assert '<div class="html-attention-explorer">' in md
    assert '<script src="../_static/attention_explorer.js"></script>' in md
    index = read_script(ROOT / "book_assets" / INDEX_FILE)
    assert [m["id"] for m in index["models"]] == ["book", "sharp", "twin"]
    assert "Three models are on offer" in chapter
    assert "Both explorers decode greedily" in chapter
