"""The user's tasks and the grid of test_compare.py, trained once for the module's tests."""

import pytest
from compare_grids import write_grid, write_user_tasks


@pytest.fixture(scope="module")
def user_tasks(tmp_path_factory):
    return write_user_tasks(tmp_path_factory.mktemp("user-tasks"))


@pytest.fixture(scope="module")
def trained_grid(user_tasks, tiny_model_dir, tmp_path_factory):
    """(grid file, output folder, comparison data) of the whole grid, trained once."""
    from pals_adapters.harness import compare

    grid = write_grid(user_tasks.parent, tiny_model_dir)
    out = tmp_path_factory.mktemp("comparison")
    return grid, out, compare(grid, out)
