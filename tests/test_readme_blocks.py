"""Every ```python block of README.md runs as written, in order, in a fresh folder.

The blocks run one after another in one namespace (later blocks use what earlier ones made,
as a reader pasting them into one session would), in one child process whose working folder is
an empty temporary folder, with ``PYTHONPATH`` at the repository and ``NEEDLE_WARNINGS=error``
(a needle diagnostic in a README block is a bug in the README).

Opting out: only a block that needs a GPU may be skipped, and only with this marker as its first
line:

    # needs a GPU: not run by tests/test_readme_blocks.py

``GPU_BLOCKS`` below counts such blocks; adding one means changing that count here, so a skipped
block is always a decision someone made. A block that is too slow is made smaller (e.g. a
subset of the training images), never skipped.
"""
import json
import os
import re
import subprocess
import sys

import numpy as np
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
README = REPOSITORY / "README.md"
GPU_MARKER = "# needs a GPU: not run by tests/test_readme_blocks.py"
GPU_BLOCKS = 0  # how many README blocks carry GPU_MARKER
SECONDS_FOR_ALL_BLOCKS = 300  # generous for a loaded 2-core machine; the blocks take ~20 s alone

# Runs in the child: each block compiled under README.md's path with its own line numbers, so a
# traceback names the README line that failed.
RUNNER = r"""
import json, sys, warnings
import trainers  # NEEDLE_WARNINGS=error applies here; then one exception, added after it so it wins:
# the blocks share one namespace, so the lecture's tensors are still alive when the Trainer block
# fits, which Trainer.fit rightly notes (EarlierGraphsWarning); a reader's separate sessions would not
warnings.filterwarnings("always", category=trainers.EarlierGraphsWarning)
readme, blocks = sys.argv[1], json.load(sys.stdin)
namespace = {"__name__": "__main__"}
for line, source in blocks:
    print(f"---- README.md block at line {line}", flush=True)
    exec(compile("\n" * line + source, readme, "exec"), namespace)
print("---- every block ran", flush=True)
"""


def python_blocks(text):
    """``(line, source, opted_out)`` of each ```python block: ``line`` is the fence's 0-based line."""
    blocks = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        if re.fullmatch(r"```python\s*", lines[index]):
            start = index
            index += 1
            body = []
            while index < len(lines) and not lines[index].startswith("```"):
                body.append(lines[index])
                index += 1
            assert index < len(lines), f"README.md line {start + 1}: a ```python block is never closed"
            source = "\n".join(body) + "\n"
            blocks.append((start + 1, source, bool(body) and body[0].strip() == GPU_MARKER))
        index += 1
    return blocks


def test_python_blocks_are_found_with_their_lines():
    text = "intro\n```python\nx = 1\n```\n```bash\nls\n```\n```python\n" + GPU_MARKER + "\ny = x\n```\n"
    assert python_blocks(text) == [(2, "x = 1\n", False), (8, GPU_MARKER + "\ny = x\n", True)]


def test_only_gpu_blocks_opt_out_and_they_are_counted():
    opted_out = [(line, source) for line, source, skipped in python_blocks(README.read_text()) if skipped]
    assert len(opted_out) == GPU_BLOCKS, (
        f"README.md has {len(opted_out)} blocks marked {GPU_MARKER!r} at lines {[line for line, _ in opted_out]}, "
        f"GPU_BLOCKS says {GPU_BLOCKS}: a block may opt out only because it needs a GPU; update GPU_BLOCKS if so"
    )
    for line, source in opted_out:
        assert "cuda" in source, f"README.md line {line}: a block marked as needing a GPU never uses cuda"


def test_every_readme_python_block_runs_in_order_in_a_fresh_folder(tmp_path):
    blocks = [(line, source) for line, source, skipped in python_blocks(README.read_text()) if not skipped]
    if int(np.__version__.split(".")[0]) < 2:  # ndl.compile refuses numpy 1 (README: Compiled steps)
        compiled = [line for line, source in blocks if "@ndl.compile" in source]
        assert len(compiled) == 1, compiled
        blocks = [(line, source) for line, source in blocks if "@ndl.compile" not in source]
    assert len(blocks) >= 4  # the lecture's graph, training by hand, the Trainer, the monitor
    environment = dict(os.environ, PYTHONPATH=str(REPOSITORY), NEEDLE_WARNINGS="error", MPLBACKEND="Agg")
    environment.pop("NEEDLE_BACKEND", None)  # the README describes the default backend
    result = subprocess.run(
        [sys.executable, "-c", RUNNER, str(README)], input=json.dumps(blocks), cwd=tmp_path, env=environment,
        capture_output=True, text=True, timeout=SECONDS_FOR_ALL_BLOCKS,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"a README.md block failed:\n{output[-6000:]}"
    assert "---- every block ran" in result.stdout
