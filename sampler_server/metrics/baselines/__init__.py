"""The control baselines' reports: the calibrated table over VTAB task results (``report``),
its plots (``plots``) and its registration (``protocol``). They report as VTAB tasks at a
data regime, so they add a table, not a protocol id."""
