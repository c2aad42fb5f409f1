"""Checks that installed distributions bring (entry points of burnin.checks; the plugin
loads them before collection): one test each, named test_<check> as the built-in
suites name theirs, so that junit.xml, admission and -k find it by its name."""

from burnin import extensions
from burnin.errors import BurninError
from burnin.model.verdict import assert_passed


def _suite(check: str):
    def test(node, burnin_run):
        assert_passed(burnin_run.verdict(check, node))
    test.__name__ = test.__qualname__ = f"test_{check}"
    test.__doc__ = f"{check}: a check of an installed distribution"
    return test


try:
    extensions.load()  # done already where the plugin runs; a plain import of this file too
except BurninError:  # the plugin says it as a usage error, before any node is touched
    pass
for _check in extensions.installed(extensions.CHECKS_GROUP):
    globals()[f"test_{_check}"] = _suite(_check)
