"""The protocol ids of metric reports, as the wire spells them: defined here once.

The server checks and stores reports by these ids and the trainers send them; both
import this module, so a report's protocol cannot drift between the two sides. The
control baselines report as VTAB tasks at a data regime (no id of their own).
"""

from __future__ import annotations

MD = "md-episode"  # one Meta-Dataset episode (source, split, seed, index)
VTAB = "vtab-task"  # one VTAB task's test (or validation) result, at a regime or not
COG = "cog"  # one ImageNet-CoG level's result (level, shots, seed)

REPORT_PROTOCOLS = (MD, VTAB, COG)
