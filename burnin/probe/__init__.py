"""The probe protocol, controller side: a probe run on a node and its output turned into a
ProbeOutcome (protocol), and the declared shapes of probe documents (shapes).

Layer 4: may import burnin.errors, burnin.core, burnin.model, burnin.transports.
"""
