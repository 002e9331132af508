"""Unit tests use tiny models: one thread is faster than two (no cross-thread sync) and
keeps timings sane when the machine is busy.

The markers `slow` and `integration` (registered in pytest.ini) let `make check` and `make
test` run the fast unit tests alone; `make test-slow` runs the marked ones. They are given
here, in one table, not in each file: see MARKED below."""

import dataclasses
from pathlib import Path

import pytest
import torch

from helpers import BOOK_RECIPE, train_reversal

torch.set_num_threads(1)

TESTS = Path(__file__).resolve().parent

# The tests that `make check` and `make test` leave out (`make test-slow` runs them). A name is
# a test function (every parametrisation of it) or a fixture: every test that uses that
# fixture gets the marker, so a new test that takes one of these fixtures is marked too. "*"
# stands for any file. Measured with `pytest tests/ --durations=40` on the 2-core machine
# while other work ran (2026-12-03): each entry took over ~3 s there, most of it in a
# fixture's set-up where one is named.
# tests/test_project_files.py checks that every name here still exists in its file.
MARKED = {
    # Starts another process: torchrun, a fresh Python, the GPU recorder's dry run.
    "integration": {
        "test_distributed.py": [
            "one_step",  # torchrun, two gloo processes, one step (12 s)
            "few_steps",  # torchrun, two processes, a few training steps (23 s)
            "test_one_process_is_refused",  # a fresh Python that imports torch (14 s)
            "test_a_port_in_use_is_named",  # the same (8.5 s)
        ],
        "test_record_gpu.py": ["dry_run"],  # -m tools.record.gpu --quick in a bare Python (25 s)
        "test_numerics.py": ["test_under_the_pin_the_fingerprint_is_the_books"],  # (8.4 s)
        # fresh Pythons without torch (under 1 s together)
        "test_tools_common.py": [
            "test_tools_common_imports_no_torch",
            "test_run_fresh_returns_the_result_from_a_process_with_env",
            "test_run_fresh_says_which_function_failed_and_why",
        ],
        "test_training.py": [
            "test_killing_the_writer_mid_write_leaves_no_valid_looking_checkpoint"  # (18 s)
        ],
        # python -m tools.check.browser in headless Chromium on two tiny pages (16 s)
        "test_check_browser.py": [
            "test_the_checker_fails_a_page_with_an_error_and_a_remote_request"
        ],
    },
    # In-process, but long: training, large tensors, a widget round trip.
    "slow": {
        "*": ["partly_trained_model"],  # tests/conftest.py: 120 training steps (21 s)
        "test_benchmark.py": ["test_handwritten_memory_grows_like_L_squared"],  # (9 s)
        "test_training.py": ["test_threads_are_set_for_training_and_restored"],  # (6.7 s)
        "test_visualize.py": ["test_explorer_widget_updates_on_control_changes"],  # (5.5 s)
        "test_kv_cache.py": ["test_long_outputs_identical"],  # three cases (7 s together)
        "test_exercises_ch16.py": [
            "test_the_books_map_names_every_bart_decoder_parameter_with_its_shape"  # (6.5 s)
        ],
        "test_record_gpu.py": [
            "test_the_recorded_training_is_the_books_training_reversal",
            "test_a_deadline_stops_training_and_says_so",  # (2 s)
        ],
        # Issue 27's mistake catalogues that train or search per mistake (0.5-3.8 s each).
        "test_exercises_ch10.py": [
            "test_each_training_loop_mistake_is_named",
            "test_the_checkers_configs_show_the_gate_and_the_stop",
        ],
        "test_exercises_ch11.py": ["test_each_beam_search_mistake_is_named"],
        "test_debugging_overfit.py": [
            "test_the_books_step_overfits_one_batch",  # (2.7 s)
            "test_each_broken_step_fails_with_its_own_message",
        ],
        "test_beam_search.py": ["test_small_widths_against_exhaustive_search"],  # (2.4 s)
        "test_llama.py": ["trained_llama"],  # 150 steps of train_gpt on the corpus (7.5 s)
    },
}


def marker_for(filename: str, test_name: str, fixtures) -> list[str]:
    """The markers MARKED gives a test: its function name, or one of its fixtures, is listed
    for its file or for every file."""
    names = {test_name, *fixtures}
    return [
        marker
        for marker, files in MARKED.items()
        if any(names & set(files.get(key, ())) for key in (filename, "*"))
    ]


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        if TESTS not in Path(str(item.fspath)).resolve().parents:
            continue  # a notebook or a file outside tests/
        name = getattr(item, "originalname", None) or item.name
        for marker in marker_for(item.fspath.basename, name, getattr(item, "fixturenames", ())):
            item.add_marker(marker)


@pytest.fixture(scope="session")
def partly_trained_model():
    """The book's model after 120 steps on 2,000 sequences (a few seconds): right on some
    sequences and wrong on others, so that comparing two ways of scoring it is not trivial.
    Shared by the tests that compare exact-match functions (each asserts it is partly right
    on its own data)."""
    cfg = dataclasses.replace(
        BOOK_RECIPE,
        train_size=2000,
        val_size=200,
        eval_size=200,
        batch_size=64,
        warmup=50,
        cooldown=0,
        lr_scale=2.0,
        max_steps=120,
        eval_every=120,
        eval_gate=0.0,
        target_exact_match=None,
    )
    return train_reversal(cfg, progress=False).model
