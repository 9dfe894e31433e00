"""How many tests a test file holds, and how many a run of it reported (chapter 20's GPU tests).

Chapter 20 prints the last result of the GPU tests (`annotated_transformer/results/gpu/gpu_tests.txt`)
beside the number of tests the file holds now, so that a reader sees whether tests were added since
that run. Plain Python: nothing here imports the package.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

__all__ = ["tests_in", "tests_run"]

OUTCOME = re.compile(r"(\d+) (?:passed|failed|skipped|xfailed|xpassed|errors?)")


def tests_in(path: Path) -> int:
    """The tests pytest collects from a file of test functions: each function once, times the values
    of each of its `pytest.mark.parametrize` decorators."""
    count = 0
    for node in ast.parse(Path(path).read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            cases = 1
            for decorator in node.decorator_list:
                if isinstance(decorator, ast.Call) and ast.unparse(decorator.func).endswith("parametrize"):
                    cases *= len(decorator.args[1].elts)
            count += cases
    return count


def tests_run(summary: str) -> int:
    """The tests a pytest summary line reports, whatever their outcome ("11 passed, 2 skipped in 3s": 13)."""
    return sum(int(number) for number in OUTCOME.findall(summary))
