"""What a run leaves behind: junit.xml and reports/latest (junit), metrics.prom
(metrics), the evidence bundle per failed node (evidence), summary.html (summary).

Layer 10: may import every layer below it; never the plugin or the CLI.
"""
