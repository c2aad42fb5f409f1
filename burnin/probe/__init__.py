"""The probe protocol, controller side: a probe run on a node and its output turned into a
ProbeOutcome (protocol), and the declared shapes of probe documents (shapes).

Layer 3: may import burnin.core, burnin.model, burnin.transports.
"""
