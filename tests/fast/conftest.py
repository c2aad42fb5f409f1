"""The fast tier: in-process tests, no probe process, host or Slurm cluster. mutmut runs
each mutant against it (docs/developer/testing.md), with --hypothesis-profile=mutation:
a property that fails is then reported at once, not shrunk to its smallest example first
(a human wants the smallest example; a mutant needs only to be caught)."""

from hypothesis import Phase, settings

settings.register_profile("mutation", phases=[Phase.explicit, Phase.reuse, Phase.generate])
