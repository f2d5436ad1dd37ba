"""Developer tasks. ``nox`` runs the default sessions; ``nox -s NAME -- ARGS`` passes ARGS on.

Every session installs the CPU build of torch pinned in the README first: an unpinned torch
pulls gigabytes of CUDA wheels.
"""

from __future__ import annotations

import nox

nox.options.sessions = ["tests", "lint", "typecheck"]
nox.options.default_venv_backend = "venv"

TORCH = "torch==2.13.0"


def _install(session: nox.Session, extras: str = "test") -> None:
    session.install(TORCH)
    session.install("-e", f".[{extras}]")


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite under Python's dev mode (what CI runs)."""
    _install(session)
    session.run("python", "-X", "dev", "-m", "pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff: lint and formatting."""
    session.install("ruff==0.17.6")
    paths = ["src", "tests", "benchmarks", "examples", "noxfile.py"]
    session.run("ruff", "check", *paths, *session.posargs)
    session.run("ruff", "format", "--check", *paths)


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict over the package."""
    _install(session)
    session.install("mypy==2.4.1")
    session.run("mypy", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks, each a ratio against native torch measured in the same run.

    Per-call overhead, import time, the compiled model, then the workloads users run
    (training loop, generate, DataLoader, DDP, peak memory) in one table. ``-- --quick``
    runs each in its short form.
    """
    _install(session, "test,examples")  # generate needs transformers
    quick = [a for a in session.posargs if a == "--quick"]
    session.run("python", "benchmarks/overhead.py", "--check", *session.posargs)
    session.run("python", "benchmarks/import_time.py", "--check", *quick)
    session.run("python", "benchmarks/compiled.py", "--check", *session.posargs)
    session.run("python", "benchmarks/workloads.py", "--check", *session.posargs)


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation (mkdocs + mkdocstrings); any warning fails the build.

    Installs only the ``docs`` extra, not the package: mkdocstrings reads ``src/``
    statically, so the build needs no torch.
    """
    extras = nox.project.load_toml("pyproject.toml")["project"]["optional-dependencies"]
    session.install(*extras["docs"])
    session.run("mkdocs", "build", "--strict", *session.posargs)


@nox.session
def example(session: nox.Session) -> None:
    """Run the CUDA-first example script redirected (README command 1)."""
    _install(session)
    session.run("python", "-m", "torchdevice", "examples/train_cuda.py", *session.posargs)


@nox.session
def notebook(session: nox.Session) -> None:
    """The notebook tests with Jupyter installed: IPython's test shell and
    ``jupyter nbconvert --execute`` of examples/notebook.ipynb in a real kernel.

    Apart from ``tests`` because the ``notebook`` extra is about 95 MB (39 packages, jedi
    and debugpy the largest); without it those two tests skip.
    """
    _install(session, "test,notebook")
    session.run("python", "-X", "dev", "-m", "pytest", "tests/test_notebook.py", *session.posargs)
