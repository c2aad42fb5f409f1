"""burnin: cluster acceptance tests that decide, node by node, whether GPU servers may
enter production. The pytest plugin lives in burnin.plugin; everything else is plain
modules usable without pytest."""

__version__ = "0.1.0"
