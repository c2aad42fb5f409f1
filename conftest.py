"""Root conftest: the burnin plugin itself arrives through its pytest11 entry point
(pip install -e .); this file only enables pytester for the project's own tests."""

pytest_plugins = ["pytester"]
