"""Mutation-test one source file against the tests chosen for it, with mutmut 3.

    python tools/mutate.py needle/atomic_file.py tests/trainers/test_atomic.py [more tests ...]

The checkout is copied into a scratch folder (tracked and untracked files git does not ignore),
that copy's pyproject.toml gets a ``[tool.mutmut]`` section naming the one file to mutate and the
tests to run, and ``mutmut run`` runs there, so the checkout itself never holds a ``mutants/``
folder and two runs on two files do not share state. At the end it prints mutmut's per-mutant
results and one line of counts (killed / survived / timeout / other); ``--keep`` leaves the scratch
folder to inspect a survivor with ``mutmut show NAME`` from inside it. Needs the ``mutation``
extra (``pip install -e '.[mutation]'``). See docs/mutation.md.
"""
import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def copy_checkout(target: Path) -> None:
    """The files git knows (tracked, or untracked and not ignored) of the checkout, into ``target``."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT, check=True, capture_output=True,
    ).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def mutmut_section(source_file: str, tests: list[str]) -> str:
    """A ``[tool.mutmut]`` table mutating ``source_file`` only, against ``tests`` only."""
    quoted = lambda items: "[" + ", ".join(f'"{item}"' for item in items) + "]"  # noqa: E731
    return (
        "\n[tool.mutmut]\n"
        f'source_paths = ["needle", "trainers"]\n'
        f"only_mutate = {quoted([source_file])}\n"
        f"pytest_add_cli_args_test_selection = {quoted(tests)}\n"
        # the doctests of needle/ and trainers/ would otherwise run against every mutant too
        f'pytest_add_cli_args = ["-p", "no:cacheprovider", "-o", "addopts="]\n'
        f'also_copy = ["conftest.py", "examples", "benchmarks"]\n'
        "use_git_change_detection = false\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source_file", help="the file to mutate, e.g. needle/atomic_file.py")
    parser.add_argument("tests", nargs="+", help="the test files (or node ids) that should kill its mutants")
    parser.add_argument("--max-children", type=int, default=2, help="mutants tested at once (default 2)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder and print its path")
    arguments = parser.parse_args()
    if not (ROOT / arguments.source_file).is_file():
        parser.error(f"source_file {arguments.source_file!r} is not a file of the checkout {ROOT}")
    scratch = Path(tempfile.mkdtemp(prefix="needle-mutation-"))
    started = time.monotonic()
    try:
        copy_checkout(scratch)
        with open(scratch / "pyproject.toml", "a") as stream:
            stream.write(mutmut_section(arguments.source_file, arguments.tests))
        mutmut = [sys.executable, "-m", "mutmut"]
        environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
        subprocess.run(mutmut + ["run", "--max-children", str(arguments.max_children)], cwd=scratch,
                       env=environment, check=False)
        results = subprocess.run(mutmut + ["results", "--all", "true"], cwd=scratch, env=environment,
                                 capture_output=True, text=True, check=False).stdout
        print(results)
        for line in results.splitlines():  # the diff of every mutant that no test caught
            name, _, status = line.strip().rpartition(": ")
            if status in ("survived", "timeout", "no tests"):
                shown = subprocess.run(mutmut + ["show", name], cwd=scratch, env=environment,
                                       capture_output=True, text=True, check=False)
                print(f"---- {status}: {shown.stdout}")
        counts = collections.Counter(line.rsplit(":", 1)[1].strip() for line in results.splitlines() if ":" in line)
        total = sum(counts.values())
        print(f"{arguments.source_file}: {total} mutants, " + ", ".join(f"{n} {k}" for k, n in counts.most_common())
              + f" ({time.monotonic() - started:.0f} s)")
        if arguments.keep:
            print(f"scratch folder kept: {scratch}")
        return 0
    finally:
        if not arguments.keep:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
