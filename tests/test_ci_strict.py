"""Tests that cannot hide: with CI set, a skip at any level is a failure (support/ci_strict.py,
which tests/conftest.py registers): a test's own skip, a module-level
`pytest.skip(allow_module_level=True)` and a module-level `pytest.importorskip`. Without
CI they are skips, as on a developer's machine. Each inner run loads the plugin alone."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

MODULES = {
    "test_in_body": "def test_x():\n    import pytest\n    pytest.skip('no tool here')\n",
    "test_module_skip": ("import pytest\npytest.skip('no tool here', allow_module_level=True)"
                         "\n\ndef test_x():\n    pass\n"),
    "test_importorskip": ("import pytest\npytest.importorskip('no_such_module_anywhere')\n\n"
                          "def test_x():\n    pass\n"),
    "test_fine": "def test_x():\n    pass\n",
}


def run(pytester, monkeypatch, ci: bool):
    pytester.makepyfile(**MODULES)
    if ci:
        monkeypatch.setenv("CI", "true")
    else:
        monkeypatch.delenv("CI", raising=False)
    return pytester.runpytest_inprocess("-p", "support.ci_strict", "-p", "no:cacheprovider",
                                        "--continue-on-collection-errors", "-rA",
                                        "-W", "ignore::pytest.PytestAssertRewriteWarning")


def test_every_kind_of_skip_fails_under_ci(pytester, monkeypatch):
    result = run(pytester, monkeypatch, ci=True)
    text = result.stdout.str()
    assert result.ret != 0, text
    counts = result.parseoutcomes()
    assert counts.get("skipped", 0) == 0, text
    assert counts.get("passed") == 1, text
    assert counts.get("failed") == 1 and counts.get("errors", counts.get("error")) == 2, text
    assert "test_x - skipped in CI, where nothing may be: Skipped: no tool here" in text, text
    assert "test_module_skip.py skipped as a whole in CI, where nothing may be" in text
    assert ("test_importorskip.py skipped as a whole in CI, where nothing may be" in text
            and "no_such_module_anywhere" in text), text


def test_without_ci_they_are_skips(pytester, monkeypatch):
    result = run(pytester, monkeypatch, ci=False)
    assert result.ret == 0, result.stdout.str()
    assert result.parseoutcomes() == {"passed": 1, "skipped": 3}, result.stdout.str()


@pytest.mark.parametrize("module", ["test_module_skip", "test_importorskip"])
def test_a_module_level_skip_alone_fails_the_run_under_ci(pytester, monkeypatch, module):
    pytester.makepyfile(**{module: MODULES[module]})
    monkeypatch.setenv("CI", "true")
    result = pytester.runpytest_inprocess("-p", "support.ci_strict", "-p", "no:cacheprovider")
    assert result.ret != 0, result.stdout.str()
    assert "skipped as a whole in CI" in result.stdout.str()
